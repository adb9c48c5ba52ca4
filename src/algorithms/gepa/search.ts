import { writeFile } from 'node:fs/promises';
import type { QuerySource } from '../../adapters/source.js';
import type { NamedResources, PromptTemplateResource, RolloutMode } from '../../api/types.js';
import type { AlgorithmContext } from '../algorithm.js';
import { evaluate, transcripts, type Evaluation } from '../shared/evaluate.js';
import { extractEdit, placeholderProblem, placeholdersOf } from '../shared/templates.js';
import type { RunTranscript } from '../shared/transcripts.js';
import { pairedDifference, type PairedDifference } from '../eval/statistics.js';
import { AlgorithmRun } from '../shared/algorithm-run.js';
import type { ChatModel } from '../shared/chat-model.js';
import { OptionsError, type OptionProblem } from '../shared/options.js';
import { Batches, Random, streamSeed } from '../shared/random.js';
import { CostClock } from '../shared/cost-clock.js';
import {
  Stop,
  askModel,
  callRefused,
  checkRolloutBudget,
  endUnscored,
  publishBest,
  nextVersion,
  recordedOptions,
  runToResume,
  searchModel,
  stopIfAsked,
  tokensSpent,
  untilStopped,
  withSource,
  type SearchSettings,
  type StopKind,
} from '../shared/search.js';
import type { GEPASettings } from './options.js';
import { pairKey, paretoFrontier, planMerge, sampleFrontier, type MergePlan, type PoolEntry } from './pareto.js';
import {
  noCost,
  readRun,
  recordBest,
  recordCandidate,
  recordIteration,
  recordScores,
  recordSkipped,
  valScoreOf,
  type GepaCandidate,
  type GepaCost,
  type GepaState,
} from './record.js';
import { blamedComponent, reflectionMessages } from './reflection.js';

/** How a search ended: its iterations ran, the frontier stopped moving, a budget was spent, or it was asked to stop. */
export type GepaStopKind = StopKind | 'converged';

export interface GEPAResult {
  /** The rollout that records the run (resume it with `resumeRun`). */
  readonly runId: string;
  readonly stopped: GepaStopKind;
  readonly stopReason: string;
  /** Iterations completed. */
  readonly iterations: number;
  /** The prompt_template resources it evolved. */
  readonly components: readonly string[];
  readonly seed: GepaCandidate;
  /** The highest mean score on the validation set. */
  readonly best: GepaCandidate;
  /** The Pareto frontier at the end. */
  readonly frontier: readonly string[];
  /** Every candidate of the run, seed first, in the order they were made. */
  readonly candidates: readonly GepaCandidate[];
  /** Best minus seed, task by task over the validation set, with its 95% interval; null when they share no task. */
  readonly difference: PairedDifference | null;
  /** Per iteration (the last may be one a stop cut short), and in all (its rollouts as SQL counts them). */
  readonly cost: { readonly iterations: readonly (GepaCost & { iteration: number })[]; readonly total: GepaCost };
}

export type GepaSearchSettings = SearchSettings<GEPASettings>;

/**
 * The run-time of one GEPA run: the pool of candidates with per-task validation scores, the
 * Pareto frontier over them, one proposal per iteration (a reflective mutation of one component,
 * or a merge of two lineages), and what it spent.
 */
export class GepaSearch<T> {
  private readonly candidates = new Map<string, GepaCandidate>();
  private readonly costs: (GepaCost & { iteration: number })[] = [];
  private readonly reflector: ChatModel;
  private random: Random;
  private trainBatches: Batches;
  private valBatches: Batches;
  private iteration = 0;
  private pool: string[] = [];
  private cursors: Record<string, number> = {};
  private merges = 0;
  private tried = new Set<string>();
  private stale = 0;
  private improved = false;
  private versions = 0;
  private readonly spent = noCost();
  private readonly clock = new CostClock(noCost);

  private constructor(
    private readonly settings: GepaSearchSettings,
    private readonly context: AlgorithmContext<T> & { source: QuerySource },
    private readonly run: AlgorithmRun,
    private readonly seedResources: NamedResources,
    readonly components: readonly string[],
  ) {
    this.reflector = searchModel(settings, settings.reflectionModel, (line) => this.log(`reflection ${line}`));
    this.random = new Random(streamSeed(settings.seed, 'gepa'));
    this.trainBatches = new Batches(context.train.length, settings.seed, 'train');
    this.valBatches = new Batches(context.val.length, settings.seed, 'val');
  }

  /** A new run, or the one to resume, with its seed resources checked. */
  static async open<T>(settings: GepaSearchSettings, given: AlgorithmContext<T>): Promise<GepaSearch<T>> {
    const context = withSource(given, 'GEPA');
    if (context.train.length === 0) throw new TypeError('GEPA needs training tasks: its reflections read their runs');
    if (context.val.length === 0) throw new TypeError('GEPA needs validation tasks: its Pareto frontier is over them');
    const resumeId = await runToResume(settings, context.source, 'GEPA');
    if (resumeId) return GepaSearch.resume(settings, context, resumeId);
    refuseSeedBudget(settings, context.val.length, 0);
    const resources = settings.resources ?? (await context.store.getLatestResources())?.resources;
    const components = Object.entries(resources ?? {})
      .filter(([, r]) => r.resource_type === 'prompt_template')
      .map(([name]) => name);
    if (!resources || components.length === 0)
      throw new TypeError(
        'GEPA evolves prompt_template resources: give resources (or --prompt), or publish them to the store first',
      );
    const options = recordedOptions(settings, ['apiKey']);
    const run = await AlgorithmRun.start(context.store, 'gepa', { algorithm: 'gepa', options, resources, components });
    return new GepaSearch(settings, context, run, resources, components);
  }

  private static async resume<T>(
    settings: GepaSearchSettings,
    context: AlgorithmContext<T> & { source: QuerySource },
    runId: string,
  ): Promise<GepaSearch<T>> {
    const previous = await context.store.getRolloutById(runId);
    const input = previous?.input as { resources?: NamedResources; components?: string[] } | undefined;
    if (previous?.metadata?.agl_algorithm !== 'gepa' || !input?.resources || !input.components)
      throw new TypeError(`${runId} is not a GEPA run in this store`);
    const run = await AlgorithmRun.resume(context.store, runId);
    const search = new GepaSearch(settings, context, run, input.resources, input.components);
    await search.restore();
    if (!search.pool.length) refuseSeedBudget(settings, context.val.length, search.spent.rollouts);
    return search;
  }

  /** Picks up the candidates and the last completed iteration of the run being resumed. */
  private async restore(): Promise<void> {
    const recorded = await readRun(this.run);
    for (const [version, candidate] of recorded.candidates) this.candidates.set(version, candidate);
    this.versions = nextVersion(this.candidates.keys());
    this.spent.rollouts = await this.run.rollouts(this.context.source);
    for (const { state, cost } of recorded.iterations) {
      this.costs.push({ ...cost, iteration: state.iteration });
      this.spent.reflectionTokens += cost.reflectionTokens;
    }
    const last = recorded.iterations.at(-1)?.state;
    if (!last) return this.log(`resuming ${this.run.runId}: no iteration was completed; starting over`);
    this.iteration = last.iteration;
    this.pool = [...last.pool];
    this.cursors = { ...last.cursors };
    this.merges = last.merges;
    this.tried = new Set(last.tried);
    this.stale = last.stale;
    this.improved = last.improved;
    this.random = new Random(last.random);
    this.trainBatches = new Batches(this.context.train.length, this.settings.seed, 'train', last.train);
    this.valBatches = new Batches(this.context.val.length, this.settings.seed, 'val', last.val);
    this.log(
      `resuming ${this.run.runId} (session ${this.run.session}) after iteration ${last.iteration}: best ${this.bestVersion()}`,
    );
  }

  /** Runs the iterations still to run, then publishes the best candidate. */
  async search(): Promise<GEPAResult> {
    const { stopped, stopReason } = await untilStopped(
      async () => {
        if (!this.pool.length) await this.scoreSeed();
        while (this.iteration < this.settings.iterations) {
          if (this.stale >= this.settings.patience)
            return {
              stopped: 'converged' as const,
              stopReason: `the Pareto frontier did not move in ${this.stale} proposals`,
            };
          await this.nextIteration();
        }
        const { iterations } = this.settings;
        return {
          stopped: 'completed' as const,
          stopReason: `${iterations} iteration${iterations === 1 ? '' : 's'} done`,
        };
      },
      this.run,
      this.context.signal,
      (line) => this.log(line),
    );
    return this.finish(stopped, stopReason);
  }

  private async scoreSeed(): Promise<void> {
    this.clock.start();
    const templates = Object.fromEntries(this.components.map((name) => [name, this.prompt(name).template]));
    const seed = await this.admit(
      { kind: 'seed', components: [], parents: [], templates, reflection: null },
      null,
      null,
      null,
    );
    this.log(
      `run ${this.run.runId}: seed ${seed.version} (${this.components.join(', ')}) on all ${this.context.val.length} validation tasks`,
    );
    await this.join(seed);
    await this.checkpoint();
  }

  private async nextIteration(): Promise<void> {
    this.iteration++;
    this.clock.start();
    const before = [...paretoFrontier(this.entries()).keys()].join(',');
    const plan =
      this.settings.merge && this.improved && this.merges < this.settings.maxMerges
        ? planMerge(this.entries(), paretoFrontier(this.entries()), this.tried, this.random)
        : null;
    const joined = plan ? await this.tryMerge(plan) : await this.mutate();
    // As in GEPA, a merge is tried after a mutation that joined the pool.
    this.improved = !plan && joined;
    this.stale = [...paretoFrontier(this.entries()).keys()].join(',') === before ? this.stale + 1 : 0;
    await this.checkpoint();
    const spent = tokensSpent(this.settings.maxTokens, this.spent.reflectionTokens);
    if (spent) throw new Stop('budget', spent);
  }

  /** A reflective mutation: one component of a frontier candidate, rewritten from a minibatch's runs. */
  private async mutate(): Promise<boolean> {
    const parent = this.version(sampleFrontier(paretoFrontier(this.entries()), this.random));
    const tasks = this.trainBatches.next(this.settings.minibatchSize).map((i) => this.context.train[i]);
    const [runs] = await this.evaluate([parent], [tasks], 'minibatch');
    const [shown] = await transcripts(this.context.source, [runs]);
    const component = this.pickComponent(parent, shown);
    this.log(`${this.label}: reflecting on ${component} of ${parent.version} (minibatch ${score(runs.score)})`);
    const answer = await this.reflect(component, parent, shown);
    const template = 'skipped' in answer ? '' : extractEdit(answer.text);
    const reason = 'skipped' in answer ? answer.skipped : this.skipReason(parent, component, template);
    if (reason !== null) {
      this.log(`${this.label}: a mutation of ${parent.version} skipped: ${reason}`);
      await recordSkipped(this.run, this.iteration, parent.version, reason);
      return false;
    }
    const fields = {
      kind: 'mutation' as const,
      components: [component],
      parents: [parent.version],
      templates: { ...parent.templates, [component]: template },
      reflection: 'text' in answer ? answer.text.trim() : null,
    };
    const seed = this.prompt(component);
    const problem = placeholderProblem(placeholdersOf(seed.template, seed.engine), template, seed.engine);
    if (problem) {
      const rejected = await this.admit(fields, runs.score, null, `it ${problem}`);
      this.log(`${this.label}: ${rejected.version} rejected: it ${problem}`);
      return false;
    }
    return this.tryCandidate(fields, tasks, runs.score, 'minibatch did not improve');
  }

  /** A merge of two lineages, tried on a validation subsample against what its parents scored there. */
  private async tryMerge(plan: MergePlan): Promise<boolean> {
    this.merges++;
    this.tried.add(pairKey(...plan.parents));
    const indices = this.valBatches.next(this.settings.minibatchSize);
    const parentScores = plan.parents.map((v) => mean(indices.map((i) => this.version(v).valScores?.[i] ?? 0)));
    const ancestor = this.version(plan.ancestor);
    this.log(`${this.label}: merging ${plan.parents.join(' and ')} (common ancestor ${plan.ancestor})`);
    return this.tryCandidate(
      {
        kind: 'merge',
        // What the two lineages changed and the merge combines: against either parent alone, a
        // merge would hide the half that parent brought.
        components: this.components.filter((name) => plan.templates[name] !== ancestor.templates[name]),
        parents: [...plan.parents],
        templates: plan.templates,
        reflection: null,
      },
      indices.map((i) => this.context.val[i]),
      Math.max(...parentScores),
      'merge scored below a parent',
      true,
    );
  }

  /**
   * Runs a new candidate on the tasks its parent was scored on; it joins the pool (and is scored
   * on every validation task) when it does better, or for a merge at least as well.
   */
  private async tryCandidate(
    fields: Pick<GepaCandidate, 'kind' | 'components' | 'parents' | 'templates' | 'reflection'>,
    tasks: readonly unknown[],
    parentScore: number,
    worse: string,
    tieJoins = false,
  ): Promise<boolean> {
    const resourcesId = (await this.context.store.addResources(this.resourcesOf(fields.templates))).resources_id;
    const version = `v${this.versions++}`;
    const [runs] = await this.evaluate([{ version, resourcesId }], [tasks], 'minibatch');
    const better = runs.score > parentScore || (tieJoins && runs.score === parentScore);
    const candidate = await this.admit(
      fields,
      parentScore,
      runs.score,
      better ? null : `${worse} (${score(parentScore)} -> ${score(runs.score)})`,
      { version, resourcesId },
    );
    this.log(
      `${this.label}: ${candidate.version} (${fields.kind} of ${fields.parents.join('+')}, ${fields.components.join(', ') || 'no change'}) minibatch ${score(parentScore)} -> ${score(runs.score)}${better ? '' : ': not kept'}`,
    );
    if (better) await this.join(candidate);
    return better;
  }

  /** Scores a candidate on every validation task and adds it to the pool. */
  private async join(candidate: GepaCandidate): Promise<void> {
    const [evaluation] = await this.evaluate([candidate], [this.context.val], 'val');
    candidate.valScores = evaluation.rewards.map((r) => r ?? 0);
    this.pool.push(candidate.version);
    const frontier = [...paretoFrontier(this.entries()).keys()];
    this.log(
      `${this.label}: ${candidate.version} scores ${score(valScoreOf(candidate))} on all validation tasks; frontier ${frontier.join(', ')}; best ${this.bestVersion()}`,
    );
  }

  /** Round robin over the components per candidate, or the component the feedback blames (round robin when none is named). */
  private pickComponent(parent: GepaCandidate, shown: readonly RunTranscript[]): string {
    const blamed = this.settings.componentSelection === 'blame' ? blamedComponent(this.components, shown) : null;
    if (blamed) return blamed;
    const cursor = this.cursors[parent.version] ?? 0;
    this.cursors[parent.version] = cursor + 1;
    return this.components[cursor % this.components.length];
  }

  private async reflect(
    component: string,
    parent: GepaCandidate,
    shown: readonly RunTranscript[],
  ): Promise<{ text: string } | { skipped: string }> {
    const refused = callRefused(this.context.signal, this.settings.maxTokens, this.spent.reflectionTokens);
    if (refused) return { skipped: refused };
    const messages = reflectionMessages(component, parent.templates, shown);
    const options = { temperature: this.settings.temperature, seed: this.random.int(), signal: this.context.signal };
    const answer = await askModel(this.reflector, 'reflection', messages, options, this.clock);
    if ('skipped' in answer) return answer;
    this.clock.cost.reflectionTokens += answer.tokens;
    this.spent.reflectionTokens += answer.tokens;
    return { text: answer.text };
  }

  /** Why a rewrite is no candidate at all: empty, unchanged, or one the pool already holds. */
  private skipReason(parent: GepaCandidate, component: string, template: string): string | null {
    const text = template.trim();
    if (!text) return 'the reflection gave an empty template';
    if (text === parent.templates[component].trim()) return 'the reflection changed nothing';
    const templates = { ...parent.templates, [component]: template };
    const same = this.pool.find((v) =>
      this.components.every((name) => this.version(v).templates[name].trim() === templates[name].trim()),
    );
    return same ? `the rewrite repeats ${same}` : null;
  }

  /** Records a candidate; one that ran already brings its version and resources version. */
  private async admit(
    fields: Pick<GepaCandidate, 'kind' | 'components' | 'parents' | 'templates' | 'reflection'>,
    parentBatchScore: number | null,
    batchScore: number | null,
    rejected: string | null,
    ran?: { version: string; resourcesId: string },
  ): Promise<GepaCandidate> {
    const resourcesId =
      ran?.resourcesId ??
      (batchScore === null && rejected !== null
        ? null
        : (await this.context.store.addResources(this.resourcesOf(fields.templates))).resources_id);
    const candidate: GepaCandidate = {
      ...fields,
      version: ran?.version ?? `v${this.versions++}`,
      resourcesId,
      iteration: this.iteration,
      parentBatchScore,
      batchScore,
      rejected,
      valScores: null,
    };
    this.candidates.set(candidate.version, candidate);
    await recordCandidate(this.run, candidate);
    return candidate;
  }

  /** Runs each candidate on its tasks (one batch of rollouts), records the scores and counts the cost. */
  private async evaluate(
    candidates: readonly { version: string; resourcesId: string | null }[],
    tasks: readonly (readonly unknown[])[],
    split: 'minibatch' | 'val',
  ): Promise<Evaluation[]> {
    const count = tasks.reduce((n, t) => n + t.length, 0);
    stopIfAsked(this.context.signal, 'the best candidate');
    checkRolloutBudget(this.settings.maxRollouts, this.spent.rollouts, count);
    const { evaluations, waitedSeconds } = await evaluate(
      this.context.store,
      this.context.source,
      candidates.map((c, i) => ({
        resourcesId: c.resourcesId as string,
        tasks: tasks[i],
        mode: (split === 'val' ? 'val' : 'train') as RolloutMode,
        metadata: {
          agl_run: this.run.runId,
          agl_gepa_version: c.version,
          agl_gepa_iteration: this.iteration,
          agl_gepa_split: split,
        },
      })),
      this.settings.rolloutTimeoutSeconds,
    );
    this.clock.rolloutsRan(count, waitedSeconds);
    this.spent.rollouts += count;
    await recordScores(
      this.run,
      this.iteration,
      split,
      evaluations.map((e, i) => ({
        version: candidates[i].version,
        score: e.score,
        tasks: e.rewards.map((r) => r ?? 0),
        rollouts: e.rollouts.length,
        failed: e.failed,
      })),
    );
    return evaluations;
  }

  private async checkpoint(): Promise<void> {
    const cost = this.clock.lap();
    const state: GepaState = {
      iteration: this.iteration,
      pool: this.pool,
      random: this.random.state,
      train: this.trainBatches.position,
      val: this.valBatches.position,
      cursors: this.cursors,
      merges: this.merges,
      tried: [...this.tried],
      stale: this.stale,
      improved: this.improved,
      trainSize: this.context.train.length,
      valSize: this.context.val.length,
    };
    await recordIteration(this.run, state, this.bestVersion(), [...paretoFrontier(this.entries()).keys()], cost);
    this.costs.push({ ...cost, iteration: this.iteration });
  }

  /** Publishes the best candidate's prompts as the latest resources, writes them to `out`, and closes the run. */
  private async finish(stopped: GepaStopKind, stopReason: string): Promise<GEPAResult> {
    if (!this.pool.length)
      return endUnscored(this.run, stopped, `GEPA stopped before its seed prompts were scored: ${stopReason}`);
    const best = this.version(this.bestVersion());
    const seed = this.version(this.pool[0]);
    const difference = pairedDifference(best.valScores ?? [], seed.valScores ?? [], { seed: this.settings.seed });
    if (this.settings.out) await writeFile(this.settings.out, `${JSON.stringify(best.templates, null, 2)}\n`);
    const published = await publishBest(
      this.run,
      stopped,
      async () => {
        await this.context.store.updateResources(best.resourcesId as string, this.resourcesOf(best.templates));
        await recordBest(this.run, best, stopped);
      },
      (reason) => this.log(`the best candidate (${best.version}) could not be published to the store: ${reason}`),
    );
    if (published)
      this.log(
        `best ${best.version} ${score(valScoreOf(best))} (seed ${score(valScoreOf(seed))}), now the latest resources (${best.resourcesId})`,
      );
    const completed = this.costs.at(-1)?.iteration ?? 0;
    const cut = this.clock.cutShort();
    if (cut) this.costs.push({ ...cut, iteration: this.iteration });
    const total = this.clock.total(this.costs);
    // Counted as SQL counts them (every session's rollouts of the run, a cut-short round's too).
    total.rollouts = await this.run.rollouts(this.context.source);
    return {
      runId: this.run.runId,
      stopped,
      stopReason,
      iterations: completed,
      components: this.components,
      seed,
      best,
      frontier: [...paretoFrontier(this.entries()).keys()],
      candidates: [...this.candidates.values()],
      difference,
      cost: { iterations: this.costs, total },
    };
  }

  /** The pool's candidate with the highest mean validation score; the older on a tie. */
  private bestVersion(): string {
    return this.pool.reduce((best, v) =>
      (valScoreOf(this.version(v)) ?? 0) > (valScoreOf(this.version(best)) ?? 0) ? v : best,
    );
  }

  private entries(): PoolEntry[] {
    return this.pool.map((v) => {
      const c = this.version(v);
      return { version: v, parents: c.parents, templates: c.templates, valScores: c.valScores ?? [] };
    });
  }

  private resourcesOf(templates: Readonly<Record<string, string>>): NamedResources {
    return {
      ...this.seedResources,
      ...Object.fromEntries(this.components.map((name) => [name, { ...this.prompt(name), template: templates[name] }])),
    };
  }

  private prompt(name: string): PromptTemplateResource {
    return this.seedResources[name] as PromptTemplateResource;
  }

  private version(version: string): GepaCandidate {
    const candidate = this.candidates.get(version);
    if (!candidate) throw new Error(`GEPA: no candidate ${version} in this run`);
    return candidate;
  }

  private get label(): string {
    return `iteration ${this.iteration}/${this.settings.iterations}`;
  }

  private log(line: string): void {
    this.settings.log(`gepa: ${line}`);
  }
}

const mean = (values: readonly number[]) => values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);
const score = (value: number | null) => (value === null ? '-' : value.toFixed(3));

/** Refuses a rollout budget that cannot score the seed prompts, before a rollout runs. */
function refuseSeedBudget(settings: GepaSearchSettings, valSize: number, spent: number): void {
  const needed = spent + valSize;
  if (settings.maxRollouts === undefined || settings.maxRollouts >= needed) return;
  const problem: OptionProblem = {
    key: 'maxRollouts',
    words: (option) =>
      `${option.name} ${String(option.given)}${option.from === undefined ? '' : ` (from ${option.from})`} cannot score the seed prompts: that takes ${valSize} rollouts (one per validation task); raise ${option.name} to at least ${needed}`,
  };
  throw new OptionsError(undefined, [problem], { maxRollouts: settings.maxRollouts });
}
