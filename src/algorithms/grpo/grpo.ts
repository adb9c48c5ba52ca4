import { resolve } from 'node:path';
import type { QuerySource } from '../../adapters/source.js';
import type { TrainingDone, TrainingDoneAnswer } from '../../api/training.js';
import type { NamedResources } from '../../api/types.js';
import type { Algorithm, AlgorithmContext } from '../algorithm.js';
import { sqlText } from '../../sql/literals.js';
import { AlgorithmRun } from '../shared/algorithm-run.js';
import { type RunCost, runClock } from '../shared/cost-clock.js';
import { checkJudgeOptions, judgeSettingsOf } from '../judge/options.js';
import { RolloutJudge } from '../judge/rollouts.js';
import type { TrainingBatch } from './arrow.js';
import { BatchFiles } from './files.js';
import type { BatchHandoff } from './handoff.js';
import { llmOf, ModelVersions, type ModelVersion } from './models.js';
import { type GrpoOptions, type GrpoOptionsInput, parseGrpoOptions } from './options.js';
import { BatchQueue } from './queue.js';
import { RUN_METADATA } from './rollouts.js';
import { recordStep, type StepRecord } from './record.js';
import { dropSummary, prepareStep, type PreparedStep } from './step.js';
import { Batches } from '../shared/random.js';
import { formatScore } from '../shared/report-text.js';

/**
 * GRPO: group-relative policy optimization with an external trainer. Each step runs a batch of
 * training tasks `groupSize` times each with the current model, turns the rollouts into
 * token-level rows with advantages (step.ts), hands the batch to the trainer (over HTTP,
 * queue.ts, or as files, files.ts) and waits for its done, whose model becomes the
 * next model version: the `llm` resource the next rollouts run with (models.ts). With
 * `maxStaleness` 0 every batch is on-policy; with N >= 1 the next steps' rollouts run while the
 * trainer trains, their rows at most N versions behind it. Each step is recorded in the store
 * (record.ts; SQL: `training_steps`). docs/training.md has the contract.
 */

export interface GrpoResult {
  /** The run's rollout id: `run_id` in `training_steps`. */
  readonly runId: string;
  /** Every step as recorded, in step order. */
  readonly steps: StepRecord[];
  /** The resources version of the model the run started from. */
  readonly firstResourcesId: string;
  /** The last model version, and where it is served. */
  readonly modelVersion: string;
  readonly resourcesId: string;
  readonly model: string;
  readonly endpoint: string;
  /** True when the signal stopped the run before its end. */
  readonly stopped: boolean;
  /** What the run spent, its rollouts as SQL counts them (those of a step a stop cut short too). */
  readonly cost: RunCost;
}

/** A step could not make a batch: too few usable groups after its extra rounds of tasks. */
export class GrpoError extends Error {
  constructor(
    message: string,
    readonly step: StepRecord,
  ) {
    super(message);
    this.name = 'GrpoError';
  }
}

/** What GRPO takes besides its options. */
export interface GrpoExtras {
  /** The resources to start from, an `llm` among them unless the `llm` option gives it; default: the store's latest. */
  readonly resources?: NamedResources;
  /** Where progress lines go (default: stderr); `quiet` silences them. */
  readonly log?: (line: string) => void;
}

/** What a run's dones need: its model versions, and the model each batch's done published. */
interface Session {
  readonly models: ModelVersions;
  readonly published: Map<string, ModelVersion>;
}

export class GRPO<T = unknown> implements Algorithm<T, GrpoResult> {
  readonly options: GrpoOptions;
  /** The batches the Trainer's server serves (the HTTP hand-off); none with `batchesDir`. */
  readonly trainingBatches?: BatchQueue;
  private readonly handoff: BatchHandoff;
  private readonly resources?: NamedResources;
  private readonly log: (line: string) => void;
  private session?: Session;

  /** Takes the options as given (defaults may be left out) and checks them: a TypeError names what is wrong. */
  constructor(options: GrpoOptionsInput & GrpoExtras) {
    const { resources, log, ...rest } = options;
    this.options = parseGrpoOptions(rest);
    checkJudgeOptions(this.options);
    this.resources = resources;
    this.log = log ?? ((line) => console.error(line));
    const apply = (batch: TrainingBatch, done: TrainingDone) => this.applyDone(batch, done);
    if (this.options.batchesDir === undefined) {
      this.trainingBatches = new BatchQueue(this.options.leaseSeconds, apply);
      this.handoff = this.trainingBatches;
    } else {
      this.handoff = new BatchFiles(resolve(this.options.batchesDir), apply, (line) => this.say(line));
    }
  }

  async run(context: AlgorithmContext<T>): Promise<GrpoResult> {
    const { store, train, source } = context;
    if (!source) throw new TypeError('GRPO reads the rollouts with SQL: run it with the Trainer, or give a `source`');
    if (train.length === 0) throw new TypeError('GRPO needs training tasks');
    if (this.session) throw new TypeError('this GRPO instance is running already');
    const judgeSettings = await judgeSettingsOf(this.options);
    const models = await ModelVersions.start(store, this.options, this.resources);
    const run = await AlgorithmRun.start(store, 'grpo', this.describedOptions(), models.current.resourcesId);
    const judge = judgeSettings && new RolloutJudge(judgeSettings, store, source, run, (line) => this.say(line));
    this.session = { models, published: new Map() };
    this.announce(context.serverUrl);
    const steps: StepRecord[] = [];
    const firstResourcesId = models.current.resourcesId;
    const clock = runClock();
    const result = async (stopped: boolean): Promise<GrpoResult> => ({
      runId: run.runId,
      firstResourcesId,
      steps: steps.sort((a, b) => a.step - b.step),
      modelVersion: models.current.version,
      resourcesId: models.current.resourcesId,
      model: llmOf(models.current).model,
      endpoint: llmOf(models.current).endpoint,
      stopped,
      cost: await clock.spent(source, `(metadata->>'${RUN_METADATA}') = ${sqlText(run.runId)}`),
    });
    try {
      await this.steps({ ...context, source }, run, models, steps, judge);
      const stopped = context.signal.aborted;
      await run.end(stopped ? 'cancelled' : 'succeeded');
      return await result(stopped);
    } catch (error) {
      await run.end('failed').catch(() => {});
      throw error;
    } finally {
      this.handoff.close();
      this.session = undefined;
    }
  }

  /**
   * The steps: each waits until at most `maxStaleness` batches are with the trainer, runs its
   * rollouts and hands its batch over; the trainer's done (recorded then) may come while later
   * steps run. A step that fails withdraws the batches with the trainer (recorded as stopped).
   */
  private async steps(
    context: AlgorithmContext<T> & { source: QuerySource },
    run: AlgorithmRun,
    models: ModelVersions,
    steps: StepRecord[],
    judge: RolloutJudge | undefined,
  ): Promise<void> {
    const { maxStaleness } = this.options;
    const pending = new Set<Promise<void>>();
    let failure: { error: unknown } | undefined;
    const record = async (step: StepRecord) => {
      steps.push(step);
      await recordStep(run, step);
    };
    const tasks = new Batches(context.train.length, this.options.seed, 'grpo');
    try {
      for (let step = 1; step <= this.options.steps; step++) {
        while (pending.size > maxStaleness && !failure) await Promise.race(pending);
        if (failure || context.signal.aborted) break;
        this.say(
          `step ${step}/${this.options.steps}: ${Math.min(this.options.batchSize, context.train.length)} task(s) x ${this.options.groupSize} with model version ${models.current.version}`,
        );
        const prepared = await prepareStep({
          ...context,
          step,
          runId: run.runId,
          tasks,
          models,
          judge,
          options: this.options,
          log: (line) => this.say(line),
          // A batch is trained after those with the trainer now, each (usually) a version on.
          oldestVersionIndex: () => models.current.index + pending.size - maxStaleness,
        });
        if (failure) break;
        if (!prepared.batch) {
          const ending = ended(prepared, prepared.stopped ? 'stopped' : 'failed', 0, prepared.error);
          await record(ending);
          if (prepared.stopped) break;
          throw new GrpoError(prepared.error ?? `step ${step} made no batch`, ending);
        }
        const handed = this.handOver(prepared, prepared.batch, context.signal)
          .then(record)
          .catch((error: unknown) => {
            failure ??= { error };
          });
        pending.add(handed);
        void handed.finally(() => pending.delete(handed));
      }
    } catch (error) {
      this.handoff.close();
      await Promise.all(pending);
      throw error;
    }
    await Promise.all(pending);
    if (failure) throw failure.error;
  }

  /** Hands the batch to the trainer and waits for its done: the step's record. */
  private async handOver(prepared: PreparedStep, batch: TrainingBatch, signal: AbortSignal): Promise<StepRecord> {
    const { record } = prepared;
    this.say(
      `step ${batch.step}: batch ${batch.batchId}: ${record.rows} row(s) of ${record.groups} group(s), mean reward ${formatScore(record.rewardMean)}; ${dropSummary(record)}; waiting for the trainer`,
    );
    const started = performance.now();
    const { done } = await this.handoff.offer(batch, signal);
    const answer = await done;
    const trainerSeconds = (performance.now() - started) / 1000;
    if (answer === null) return ended(prepared, 'stopped', trainerSeconds);
    const next = this.session?.published.get(batch.batchId);
    this.session?.published.delete(batch.batchId);
    this.say(
      `step ${batch.step}: done${next ? `; model version ${next.version}: ${llmOf(next).model} at ${llmOf(next).endpoint}` : ''}`,
    );
    return {
      ...ended(prepared, 'trained', trainerSeconds),
      nextModelVersion: next?.version,
      nextResourcesId: next?.resourcesId,
      metrics: answer.metrics,
    };
  }

  /** A trainer's done: its model, when it gives one, becomes the next version (what the next rollouts run with). */
  private async applyDone(batch: TrainingBatch, done: TrainingDone): Promise<TrainingDoneAnswer> {
    const session = this.session;
    if (!session) throw new TypeError('the GRPO run has ended');
    const published = done.model ? await session.models.publish(done.model) : undefined;
    if (published) session.published.set(batch.batchId, published);
    return {
      batch_id: batch.batchId,
      step: batch.step,
      model_version: published?.version ?? session.models.current.version,
    };
  }

  /** Says where the trainer finds the batches. */
  private announce(serverUrl: string | undefined): void {
    if (this.options.batchesDir !== undefined)
      this.say(
        `batches go to ${resolve(this.options.batchesDir)} as Parquet files; the trainer ends each with a .done.json file`,
      );
    else if (serverUrl)
      this.say(`the trainer pulls batches from ${serverUrl}/v1/agl/training/batches/next (docs/training.md)`);
  }

  /** The options as the run's rollout records them: the API keys left out. */
  private describedOptions(): Record<string, unknown> {
    const { llm, judgeApiKey, ...rest } = this.options;
    const judgeKey = judgeApiKey === undefined ? {} : { judgeApiKey: '(set)' };
    return llm
      ? { ...rest, ...judgeKey, llm: { ...llm, apiKey: llm.apiKey === null ? null : '(set)' } }
      : { ...rest, ...judgeKey };
  }

  private say(text: string): void {
    if (!this.options.quiet) this.log(`grpo: ${text}`);
  }
}

/** A GRPO algorithm from options as a config file or command line gives them. */
export function grpoFromOptions<T = unknown>(options: unknown): GRPO<T> {
  return new GRPO<T>(options as GrpoOptionsInput);
}

/** A prepared step's record, ended now with `status`. */
function ended(
  prepared: PreparedStep,
  status: StepRecord['status'],
  trainerSeconds: number,
  error?: string,
): StepRecord {
  return { ...prepared.record, status, endTime: Date.now() / 1000, trainerSeconds, error };
}
