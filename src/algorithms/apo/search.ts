import { writeFile } from 'node:fs/promises';
import type { QuerySource } from '../../adapters/source.js';
import type { NamedResources, PromptTemplateResource, RolloutMode } from '../../api/types.js';
import type { AlgorithmContext } from '../algorithm.js';
import { AlgorithmRun } from '../shared/algorithm-run.js';
import type { JudgeSettings } from '../judge/judge.js';
import { judgeSettingsOf } from '../judge/options.js';
import { RolloutJudge } from '../judge/rollouts.js';
import { evaluate, transcripts, type Evaluation } from '../shared/evaluate.js';
import type { APOSettings } from './options.js';
import { CRITIC_VARIANTS, EDITOR_VARIANTS, criticMessages, editorMessages } from './prompts.js';
import { extractEdit, placeholderProblem, placeholdersOf } from '../shared/templates.js';
import type { RunTranscript } from '../shared/transcripts.js';
import {
  noCost,
  readRun,
  recordBest,
  recordCandidate,
  recordRound,
  recordScores,
  recordSkipped,
  type Candidate,
  type Cost,
  type SearchState,
} from './record.js';
import type { ChatMessage, ChatModel } from '../shared/chat-model.js';
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
import { type PairedDifference, pairedDifference } from '../eval/index.js';

export interface APOResult {
  /** The rollout that records the run (resume it with `resumeRun`). */
  readonly runId: string;
  readonly stopped: StopKind;
  /** Why it stopped, in words. */
  readonly stopReason: string;
  /** Rounds completed. */
  readonly rounds: number;
  /** The prompt_template resources it optimized, one edit changing one of them. */
  readonly components: readonly string[];
  readonly seed: Candidate;
  /** The best prompt: the highest score on the whole validation set. */
  readonly best: Candidate;
  /**
   * best - seed on the validation tasks, paired by task (a rollout without a reward scores 0, as
   * in the scores), with its 95% interval and p-value; null when either lacks per-task rewards.
   */
  readonly improvement: PairedDifference | null;
  readonly beam: readonly string[];
  /** Every candidate of the run, seed first, in the order they were made. */
  readonly candidates: readonly Candidate[];
  /** Per round (round 0 scores the seed; the last may be one a stop cut short), and in all (its rollouts as SQL counts them). */
  readonly cost: { readonly rounds: readonly (Cost & { round: number })[]; readonly total: Cost };
}

export type ApoSearchSettings = SearchSettings<APOSettings>;

/** One parent, one component of it, one training batch, one critique and one edit. */
interface Branch {
  readonly parent: Candidate;
  readonly component: string;
  readonly tasks: number[];
  readonly criticVariant: number;
  readonly editorVariant: number;
  readonly seed: number;
}

type EditOutcome = { template: string; critique: string; gradientScore: number } | { skipped: string };

/** The run-time of one APO run: its store, data, generator, candidates and what it spent. */
export class Search<T> {
  private readonly candidates = new Map<string, Candidate>();
  private readonly costs: (Cost & { round: number })[] = [];
  private readonly critic: ChatModel;
  private readonly editor: ChatModel;
  /** Scores the rollouts that bring no reward, with judge options. */
  private readonly judge?: RolloutJudge;
  private random: Random;
  private trainBatches: Batches;
  private valBatches: Batches;
  private round = 0;
  private beam: string[] = [];
  private best = '';
  private versions = 0;
  /** Edits made so far: the next one changes component `edits % components.length` (round robin). */
  private edits = 0;
  /** Candidates of a round a resumed run is doing again: an edit may repeat them. */
  private readonly abandoned = new Set<string>();
  /** Rollouts and tokens spent so far, against the budget. */
  private readonly spent = noCost();
  private readonly clock = new CostClock(noCost);

  private constructor(
    private readonly settings: ApoSearchSettings,
    private readonly context: AlgorithmContext<T> & { source: QuerySource },
    private readonly run: AlgorithmRun,
    private readonly components: readonly string[],
    private readonly seedResources: NamedResources,
    judgeSettings: JudgeSettings | undefined,
  ) {
    this.critic = searchModel(settings, settings.criticModel, (line) => this.log(`critic ${line}`));
    this.editor = searchModel(settings, settings.editorModel, (line) => this.log(`editor ${line}`));
    if (judgeSettings)
      this.judge = new RolloutJudge(judgeSettings, context.store, context.source, run, (line) => this.log(line));
    this.random = new Random(streamSeed(settings.seed, 'search'));
    this.trainBatches = new Batches(context.train.length, settings.seed, 'train');
    this.valBatches = new Batches(context.val.length, settings.seed, 'val');
  }

  private promptOf(component: string): PromptTemplateResource {
    return this.seedResources[component] as PromptTemplateResource;
  }

  /** A new run, or the one to resume, with its seed resources checked. */
  static async open<T>(settings: ApoSearchSettings, given: AlgorithmContext<T>): Promise<Search<T>> {
    const context = withSource(given, 'APO');
    if (context.train.length === 0) throw new TypeError('APO needs training tasks: its critiques read their runs');
    if (context.val.length === 0) throw new TypeError('APO needs validation tasks: its candidates are scored on them');
    if (!settings.resume && !settings.resumeRun) refuseSeedBudget(settings, context.val.length, 0);
    const judgeSettings = await judgeSettingsOf(settings);
    const resumeId = await runToResume(settings, context.source, 'APO');
    if (resumeId) return Search.resume(settings, context, resumeId, judgeSettings);
    const resources = settings.resources ?? (await context.store.getLatestResources())?.resources;
    if (!resources)
      throw new TypeError(
        'APO starts from a prompt_template resource: give resources (or --prompt), or publish them to the store first',
      );
    const components = promptResourceNames(resources, settings.promptResource);
    // What the run was asked to do, for whoever reads its rollout; the API key stays out.
    const options = recordedOptions(settings, ['apiKey', 'judgeApiKey']);
    const run = await AlgorithmRun.start(context.store, 'apo', {
      algorithm: 'apo',
      options,
      resources,
      // One name as a text, as runs before several prompts were recorded: they still resume.
      prompt_resource: components.length === 1 ? components[0] : components,
    });
    return new Search(settings, context, run, components, resources, judgeSettings);
  }

  private static async resume<T>(
    settings: ApoSearchSettings,
    context: AlgorithmContext<T> & { source: QuerySource },
    runId: string,
    judgeSettings: JudgeSettings | undefined,
  ): Promise<Search<T>> {
    const previous = await context.store.getRolloutById(runId);
    const input = previous?.input as { resources?: NamedResources; prompt_resource?: string | string[] } | undefined;
    if (previous?.metadata?.agl_algorithm !== 'apo' || !input?.resources || !input.prompt_resource)
      throw new TypeError(`${runId} is not an APO run in this store`);
    const run = await AlgorithmRun.resume(context.store, runId);
    const components = [input.prompt_resource].flat();
    const search = new Search(settings, context, run, components, input.resources, judgeSettings);
    await search.restore();
    if (!search.best) refuseSeedBudget(settings, context.val.length, search.spent.rollouts);
    return search;
  }

  /** Picks up the candidates and the last completed round of the run being resumed. */
  private async restore(): Promise<void> {
    const recorded = await readRun(this.run);
    for (const [version, candidate] of recorded.candidates) this.candidates.set(version, candidate);
    this.versions = nextVersion(this.candidates.keys());
    this.spent.rollouts = await this.run.rollouts(this.context.source);
    for (const { state, cost } of recorded.rounds) {
      this.costs.push({ ...cost, round: state.round });
      this.spent.criticTokens += cost.criticTokens;
      this.spent.editorTokens += cost.editorTokens;
    }
    const last = recorded.rounds.at(-1)?.state;
    for (const c of this.candidates.values()) if (c.round > (last?.round ?? -1)) this.abandoned.add(c.version);
    if (!last)
      return this.log(
        `resuming ${this.run.runId} (session ${this.run.session}): no round was completed; starting over`,
      );
    if (last.trainSize !== this.context.train.length || last.valSize !== this.context.val.length) {
      this.log(
        `resuming ${this.run.runId}: the data changed size (train ${last.trainSize} -> ${this.context.train.length}, val ${last.valSize} -> ${this.context.val.length}); batches go on from the same positions`,
      );
    }
    this.round = last.round;
    this.edits = last.edits ?? 0;
    this.beam = [...last.beam];
    this.best = last.best;
    this.random = new Random(last.random);
    this.trainBatches = new Batches(this.context.train.length, this.settings.seed, 'train', last.train);
    this.valBatches = new Batches(this.context.val.length, this.settings.seed, 'val', last.val);
    this.log(
      `resuming ${this.run.runId} (session ${this.run.session}) after round ${last.round}: best ${this.best} ${score(this.version(this.best).valScore)}`,
    );
  }

  /** Runs the rounds still to run, then publishes the best prompt. */
  async search(): Promise<APOResult> {
    const { stopped, stopReason } = await untilStopped(
      async () => {
        if (!this.best) await this.scoreSeed();
        while (this.round < this.settings.rounds) await this.nextRound();
        const { rounds } = this.settings;
        return { stopped: 'completed' as const, stopReason: `${rounds} round${rounds === 1 ? '' : 's'} done` };
      },
      this.run,
      this.context.signal,
      (line) => this.log(line),
    );
    return this.finish(stopped, stopReason);
  }

  /** Round 0: the seed prompt becomes v0, scored on the whole validation set. */
  private async scoreSeed(): Promise<void> {
    this.clock.start();
    const seed = await this.admit({
      component: null,
      templates: Object.fromEntries(this.components.map((name) => [name, this.promptOf(name).template])),
      parent: null,
      critique: null,
      gradientScore: null,
      rejected: null,
    });
    this.log(`run ${this.run.runId}: seed ${seed.version} on all ${this.context.val.length} validation tasks`);
    const [evaluation] = await this.evaluate([seed], [this.context.val], 'val');
    seed.valScore = evaluation.score;
    seed.valRewards = evaluation.rewards;
    this.beam = [seed.version];
    this.best = seed.version;
    this.log(`seed ${seed.version} scores ${score(seed.valScore)}`);
    await this.checkpoint();
  }

  private async nextRound(): Promise<void> {
    this.round++;
    this.clock.start();
    const branches = this.branches();
    this.log(
      `${this.label}: ${branches.length} critiques of ${new Set(branches.map((b) => b.parent.version)).size} parent(s) on training batches of ${this.settings.gradientBatchSize}`,
    );
    const runs = await this.evaluate(
      branches.map((b) => b.parent),
      branches.map((b) => b.tasks.map((i) => this.context.train[i])),
      'train',
    );
    const shown = await transcripts(this.context.source, runs);
    const edits = await mapLimit(branches, this.settings.concurrency, (branch, i) =>
      this.critiqueAndEdit(branch, runs[i], shown[i]),
    );
    stopIfAsked(this.context.signal, 'the best prompt');
    const fresh: Candidate[] = [];
    for (const [i, edit] of edits.entries()) {
      const candidate = await this.candidateFrom(branches[i], edit);
      if (candidate) fresh.push(candidate);
    }
    if (fresh.length === 0) this.log(`${this.label}: no new candidate; the beam stays as it was`);
    else await this.selectBeam(fresh);
    await this.scoreLeader();
    await this.checkpoint();
    const spent = tokensSpent(this.settings.maxTokens, this.tokens);
    if (spent) throw new Stop('budget', spent);
  }

  /** Parents as Agent Lightning picks them: the beam in a random order, repeated up to beamWidth when it is smaller. */
  private branches(): Branch[] {
    const beam = this.beam.map((v) => this.version(v));
    const order =
      beam.length < this.settings.beamWidth
        ? Array.from({ length: this.settings.beamWidth }, (_, i) => i % beam.length)
        : this.random.sample(beam.length, this.settings.beamWidth);
    return order.flatMap((index) =>
      Array.from({ length: this.settings.branchFactor }, () => ({
        parent: beam[index],
        component: this.components[this.edits++ % this.components.length],
        tasks: this.trainBatches.next(this.settings.gradientBatchSize),
        criticVariant: this.random.below(CRITIC_VARIANTS),
        editorVariant: this.random.below(EDITOR_VARIANTS),
        seed: this.random.int(),
      })),
    );
  }

  /** The critique of a parent's runs and the editor's rewrite from it, or why the branch is skipped. */
  private async critiqueAndEdit(branch: Branch, runs: Evaluation, shown: RunTranscript[]): Promise<EditOutcome> {
    const options = { temperature: this.settings.temperature, seed: branch.seed, signal: this.context.signal };
    const template = branch.parent.templates[branch.component];
    // With one prompt the critic and editor are not told its name: APO asks what it always asked.
    const named = this.components.length > 1 ? branch.component : undefined;
    const critique = await this.ask('critic', criticMessages(template, shown, branch.criticVariant, named), options);
    if ('skipped' in critique) return critique;
    if (!critique.text.trim()) return { skipped: 'the critic answered nothing' };
    const edit = await this.ask(
      'editor',
      editorMessages(template, critique.text, branch.editorVariant, named),
      options,
    );
    if ('skipped' in edit) return edit;
    return { template: extractEdit(edit.text), critique: critique.text.trim(), gradientScore: runs.score };
  }

  private async ask(
    role: 'critic' | 'editor',
    messages: ChatMessage[],
    options: { temperature: number; seed: number; signal: AbortSignal },
  ): Promise<{ text: string } | { skipped: string }> {
    const refused = callRefused(this.context.signal, this.settings.maxTokens, this.tokens);
    if (refused) return { skipped: refused };
    const answer = await askModel(role === 'critic' ? this.critic : this.editor, role, messages, options, this.clock);
    if ('skipped' in answer) return answer;
    const key = role === 'critic' ? 'criticTokens' : 'editorTokens';
    this.clock.cost[key] += answer.tokens;
    this.spent[key] += answer.tokens;
    return { text: answer.text };
  }

  /** A new candidate from a branch's edit; null (the reason logged and recorded) when there is none. */
  private async candidateFrom(branch: Branch, edit: EditOutcome): Promise<Candidate | null> {
    const parent = branch.parent.version;
    const { component } = branch;
    const templates = 'skipped' in edit ? {} : { ...branch.parent.templates, [component]: edit.template };
    const reason = 'skipped' in edit ? edit.skipped : this.skipReason(branch, templates);
    if (reason !== null || 'skipped' in edit) {
      this.log(`${this.label}: an edit of ${parent} skipped: ${reason}`);
      await recordSkipped(this.run, this.round, parent, reason ?? '');
      return null;
    }
    const seed = this.promptOf(component);
    const problem = placeholderProblem(placeholdersOf(seed.template, seed.engine), edit.template, seed.engine);
    const candidate = await this.admit({
      component,
      templates,
      parent,
      critique: edit.critique,
      gradientScore: edit.gradientScore,
      rejected: problem,
    });
    const changed = this.components.length > 1 ? ` (${component})` : '';
    this.log(
      `${this.label}: ${candidate.version} from ${parent}${changed}${problem ? ` rejected: it ${problem}` : ''}: ${oneLine(edit.template)}`,
    );
    return problem ? null : candidate;
  }

  /** Why an edit is no candidate at all: empty, unchanged, or one the run has already made. */
  private skipReason(branch: Branch, templates: Readonly<Record<string, string>>): string | null {
    const text = templates[branch.component].trim();
    if (!text) return 'the edit is empty';
    if (text === branch.parent.templates[branch.component].trim()) return 'the edit changed nothing';
    const same = [...this.candidates.values()].find(
      (c) =>
        !this.abandoned.has(c.version) && this.components.every((n) => c.templates[n].trim() === templates[n].trim()),
    );
    return same ? `the edit repeats ${same.version}` : null;
  }

  /** Records a candidate; one that is not rejected becomes a resources version. */
  private async admit(
    fields: Pick<Candidate, 'component' | 'templates' | 'parent' | 'critique' | 'gradientScore' | 'rejected'>,
  ): Promise<Candidate> {
    const resources = this.resourcesWith(fields.templates);
    const resourcesId = fields.rejected ? null : (await this.context.store.addResources(resources)).resources_id;
    const candidate: Candidate = {
      ...fields,
      template: fields.templates[fields.component ?? this.components[0]],
      version: `v${this.versions++}`,
      resourcesId,
      round: this.round,
      batchScore: null,
      valScore: null,
      valRewards: null,
    };
    this.candidates.set(candidate.version, candidate);
    await recordCandidate(this.run, candidate, candidate.component ?? this.components.join(','));
    return candidate;
  }

  /** The seed resources with these templates in place of the components'. */
  private resourcesWith(templates: Readonly<Record<string, string>>): NamedResources {
    const resources = { ...this.seedResources };
    for (const name of this.components) resources[name] = { ...this.promptOf(name), template: templates[name] };
    return resources;
  }

  /** Scores the beam and the new candidates on one validation batch and keeps the best beamWidth. */
  private async selectBeam(fresh: Candidate[]): Promise<void> {
    const contenders = [...this.beam.map((v) => this.version(v)), ...fresh];
    const batch = this.valBatches.next(this.settings.valBatchSize);
    const tasks = batch.map((i) => this.context.val[i]);
    this.log(`${this.label}: scoring ${contenders.length} prompts on ${tasks.length} validation tasks`);
    // A batch as large as the validation set is the whole set: its scores are full scores too.
    const whole = tasks.length === this.context.val.length;
    const evaluations = await this.evaluate(
      contenders,
      contenders.map(() => tasks),
      'val_batch',
    );
    for (const [i, c] of contenders.entries()) {
      c.batchScore = evaluations[i].score;
      if (whole) {
        c.valScore = evaluations[i].score;
        // The batch is the validation set shuffled: its rewards go back into task order.
        const rewards = new Array<number | null>(batch.length);
        for (const [at, task] of batch.entries()) rewards[task] = evaluations[i].rewards[at];
        c.valRewards = rewards;
      }
    }
    if (whole)
      await recordScores(
        this.run,
        this.round,
        'val',
        contenders.map((c) => ({
          version: c.version,
          score: c.valScore ?? 0,
          rollouts: 0,
          failed: 0,
          rewards: c.valRewards ?? [],
        })),
      );
    // Sorting is stable: on a tie the beam's own prompts, then older candidates, stay ahead.
    this.beam = [...contenders]
      .sort((a, b) => (b.batchScore ?? 0) - (a.batchScore ?? 0))
      .slice(0, this.settings.beamWidth)
      .map((c) => c.version);
    this.log(
      `${this.label}: ${contenders.map((c) => `${c.version} ${score(c.batchScore)}`).join(' · ')} -> beam ${this.beam.join(', ')}`,
    );
  }

  /** The beam's leader on the whole validation set (once per prompt); it may become the best. */
  private async scoreLeader(): Promise<void> {
    const leader = this.version(this.beam[0]);
    if (leader.valScore === null) {
      const [evaluation] = await this.evaluate([leader], [this.context.val], 'val');
      leader.valScore = evaluation.score;
      leader.valRewards = evaluation.rewards;
    }
    const best = this.version(this.best);
    const better = leader.valScore > (best.valScore ?? Number.NEGATIVE_INFINITY);
    if (better) this.best = leader.version;
    this.log(
      `${this.label}: leader ${leader.version} scores ${score(leader.valScore)} on all validation tasks; best ${this.best} ${score(this.version(this.best).valScore)}${better ? ' (new)' : ''}`,
    );
  }

  /**
   * Runs each candidate on its tasks (one batch of rollouts for all), records the scores and
   * counts the cost. Stops before starting when the budget or a stop request says so.
   */
  private async evaluate(
    candidates: readonly Candidate[],
    tasks: readonly (readonly unknown[])[],
    split: 'train' | 'val_batch' | 'val',
  ): Promise<Evaluation[]> {
    const count = tasks.reduce((n, t) => n + t.length, 0);
    stopIfAsked(this.context.signal, 'the best prompt');
    checkRolloutBudget(this.settings.maxRollouts, this.spent.rollouts, count);
    const requests = candidates.map((c, i) => ({
      resourcesId: resourcesIdOf(c),
      tasks: tasks[i],
      mode: (split === 'train' ? 'train' : 'val') as RolloutMode,
      metadata: {
        agl_run: this.run.runId,
        agl_apo_version: c.version,
        agl_apo_round: this.round,
        agl_apo_split: split,
      },
    }));
    const { evaluations, waitedSeconds } = await evaluate(
      this.context.store,
      this.context.source,
      requests,
      this.settings.rolloutTimeoutSeconds,
      this.judge,
    );
    this.clock.rolloutsRan(count, waitedSeconds);
    this.spent.rollouts += count;
    const scores = evaluations.map((e, i) => ({
      version: candidates[i].version,
      score: e.score,
      rollouts: e.rollouts.length,
      failed: e.failed,
      ...(split === 'val' ? { rewards: e.rewards } : {}),
    }));
    await recordScores(this.run, this.round, split, scores);
    return evaluations;
  }

  /** Saves the round's state (a resumed run starts from the last one) and its cost. */
  private async checkpoint(): Promise<void> {
    const cost = this.clock.lap();
    const state: SearchState = {
      round: this.round,
      beam: this.beam,
      best: this.best,
      random: this.random.state,
      edits: this.edits,
      train: this.trainBatches.position,
      val: this.valBatches.position,
      trainSize: this.context.train.length,
      valSize: this.context.val.length,
    };
    await recordRound(this.run, state, cost);
    this.costs.push({ ...cost, round: this.round });
    this.log(
      `${this.round === 0 ? 'round 0 (seed)' : this.label} done in ${cost.seconds.toFixed(1)} s: ${cost.rollouts} rollouts, ${cost.criticTokens} critic and ${cost.editorTokens} editor tokens (waiting: rollouts ${cost.rolloutSeconds.toFixed(1)} s, critic/editor ${cost.modelSeconds.toFixed(1)} s)`,
    );
  }

  /** Publishes the best prompt as the latest resources, writes it to `out`, and closes the run. */
  private async finish(stopped: StopKind, stopReason: string): Promise<APOResult> {
    if (!this.best)
      return endUnscored(this.run, stopped, `APO stopped before its seed prompt was scored: ${stopReason}`);
    const best = this.version(this.best);
    // The most recent seed: a run resumed before its first round was done scored a new one.
    const seed = [...this.candidates.values()].filter((c) => c.parent === null).at(-1) ?? best;
    if (this.settings.out) await writeFile(this.settings.out, this.outText(best));
    const published = await publishBest(
      this.run,
      stopped,
      async () => {
        await this.context.store.updateResources(resourcesIdOf(best), this.resourcesWith(best.templates));
        await recordBest(this.run, best, stopped);
      },
      (reason) => this.log(`the best prompt (${best.version}) could not be published to the store: ${reason}`),
    );
    if (published)
      this.log(
        `best ${best.version} ${score(best.valScore)} (seed ${score(seed.valScore)}), now the latest resources (${best.resourcesId})${this.settings.out ? `, written to ${this.settings.out}` : ''}`,
      );
    const completed = this.costs.at(-1)?.round ?? 0;
    const cut = this.clock.cutShort();
    if (cut) this.costs.push({ ...cut, round: this.round });
    const total = this.clock.total(this.costs);
    // Counted as SQL counts them (every session's rollouts of the run, a cut-short round's too).
    total.rollouts = await this.run.rollouts(this.context.source);
    return {
      runId: this.run.runId,
      stopped,
      stopReason,
      rounds: completed,
      components: this.components,
      seed,
      best,
      improvement: this.improvement(seed, best),
      beam: this.beam,
      candidates: [...this.candidates.values()],
      cost: { rounds: this.costs, total },
    };
  }

  /** best - seed paired by validation task, a task without a reward scoring 0 as in the scores. */
  private improvement(seed: Candidate, best: Candidate): PairedDifference | null {
    const [after, before] = [best.valRewards, seed.valRewards];
    // A resumed run whose validation set changed size scored the two on different tasks.
    if (!after || !before || after.length !== before.length) return null;
    const scores = (rewards: readonly (number | null)[]) => rewards.map((r) => r ?? 0);
    return pairedDifference(scores(after), scores(before), { seed: streamSeed(this.settings.seed, 'improvement') });
  }

  /** What `out` holds: the best prompt's template, or with several, JSON of each (resource name -> template). */
  private outText(best: Candidate): string {
    if (this.components.length > 1) return `${JSON.stringify(best.templates, null, 2)}\n`;
    return best.template.endsWith('\n') ? best.template : `${best.template}\n`;
  }

  private version(version: string): Candidate {
    const candidate = this.candidates.get(version);
    if (!candidate) throw new Error(`APO: no candidate ${version} in this run`);
    return candidate;
  }

  /** Tokens against the budget: the critic's, the editor's and, this session, the judge's. */
  private get tokens(): number {
    return this.spent.criticTokens + this.spent.editorTokens + (this.judge?.tokens ?? 0);
  }

  private get label(): string {
    return `round ${this.round}/${this.settings.rounds}`;
  }

  private log(line: string): void {
    this.settings.log(`apo: ${line}`);
  }
}

/** The names of the prompt_template resources to optimize: those named, else the only one. */
function promptResourceNames(resources: NamedResources, wanted: readonly string[] | undefined): string[] {
  const templates = Object.entries(resources)
    .filter(([, r]) => r.resource_type === 'prompt_template')
    .map(([name]) => name);
  if (wanted !== undefined) {
    const unknown = wanted.find((name) => !templates.includes(name));
    if (unknown !== undefined)
      throw new TypeError(
        `there is no prompt_template resource named "${unknown}" (there ${templates.length === 1 ? 'is' : 'are'}: ${templates.join(', ') || 'none'})`,
      );
    return [...new Set(wanted)];
  }
  if (templates.length !== 1)
    throw new TypeError(
      `APO needs to know which prompt_template resources to optimize; ${templates.length ? `there are ${templates.length} (${templates.join(', ')}): name them with promptResource (--prompt-resource, once for each)` : 'there is none'}`,
    );
  return templates;
}

/** The resources version of a candidate that is not rejected (only those are evaluated). */
function resourcesIdOf(candidate: Candidate): string {
  if (candidate.resourcesId === null)
    throw new Error(`APO: ${candidate.version} was rejected and has no resources version`);
  return candidate.resourcesId;
}

/** `fn` over `items`, at most `limit` at once; results in item order. */
async function mapLimit<I, O>(
  items: readonly I[],
  limit: number,
  fn: (item: I, index: number) => Promise<O>,
): Promise<O[]> {
  const results: O[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

const score = (value: number | null) => (value === null ? '-' : value.toFixed(3));

function oneLine(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > 100 ? `${flat.slice(0, 99)}…` : flat;
}

/**
 * Refuses a rollout budget that cannot score the seed prompt, before a rollout runs: the search
 * would spend nothing and end with no prompt to give.
 */
function refuseSeedBudget(settings: ApoSearchSettings, valSize: number, spent: number): void {
  const needed = spent + valSize;
  if (settings.maxRollouts === undefined || settings.maxRollouts >= needed) return;
  const after = spent ? ` after the ${spent} the run has spent` : '';
  const problem: OptionProblem = {
    key: 'maxRollouts',
    words: (option) =>
      `${option.name} ${String(option.given)}${option.from === undefined ? '' : ` (from ${option.from})`} cannot score the seed prompt: that takes ${valSize} rollouts (one per validation task)${after}; raise ${option.name} to at least ${needed}`,
  };
  throw new OptionsError(undefined, [problem], { maxRollouts: settings.maxRollouts });
}
