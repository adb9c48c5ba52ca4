import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { LightningStore } from '../../api/lightning-store.js';
import type { LlmResource, NamedResources, ResourcesUpdate } from '../../api/types.js';
import { type Algorithm, type AlgorithmContext, meanReward } from '../algorithm.js';
import type { QuerySource } from '../../adapters/source.js';
import { sqlText } from '../../sql/literals.js';
import { AlgorithmRun } from '../shared/algorithm-run.js';
import { type RunCost, runClock } from '../shared/cost-clock.js';
import { checkJudgeOptions, judgeSettingsOf } from '../judge/options.js';
import { RolloutJudge } from '../judge/rollouts.js';
import { formatScore } from '../shared/report-text.js';
import { parseSftOptions, type SftOptions, type SftOptionsInput } from './options.js';
import { recordIteration, type IterationRecord } from './record.js';
import { runRollouts, type RolloutRecord } from './rollouts.js';
import { chatRecords, selectSamples, tokenRecords, type Records, type Sample } from './select.js';
import {
  fillPlaceholders,
  placeholderEnv,
  runCommand,
  type CommandOutcome,
  type PlaceholderValues,
} from './training-process.js';

/**
 * SFT: rejection-sampling fine-tuning. Each iteration runs the training tasks with the current
 * `llm` resource, keeps each task's best transcripts (top fraction and/or reward threshold,
 * deduplicated), exports them (OpenAI chat JSONL or token-level Parquet) into `outDir/iteration-N/`,
 * runs the user's training command on them, and publishes the model it produced as a new
 * resources version, which the next iteration's rollouts use. Everything an iteration did is
 * recorded in the store, as spans of the run's own rollout (shared/algorithm-run.ts, record.ts;
 * SQL: `sft_iterations`). A failed training command ends the loop with an SftError that shows
 * its output, after the iteration is recorded; datasets and the versions published so far stay.
 * A stop (Ctrl-C) ends it cleanly, the command killed.
 */

export interface SftResult {
  /** The run's rollout id: `run_id` in `sft_iterations`. */
  readonly runId: string;
  /** Every iteration as recorded, the final evaluation on the validation tasks last. */
  readonly iterations: IterationRecord[];
  /** The resources version of the last model (the starting one when none was trained). */
  readonly resourcesId: string;
  readonly model: string;
  readonly endpoint: string;
  /** The last model's mean reward on the validation tasks, when there are any and the run was not stopped. */
  readonly finalValMeanReward: number | null;
  /** True when the signal stopped the run before its end. */
  readonly stopped: boolean;
  /** What the run spent, its rollouts as SQL counts them (those of an iteration a stop cut short too). */
  readonly cost: RunCost;
}

/** The training command failed, timed out, or the iteration had nothing to train on. */
export class SftError extends Error {
  constructor(
    message: string,
    readonly iteration: IterationRecord,
  ) {
    super(message);
    this.name = 'SftError';
  }
}

/** What SFT takes besides its options (which a config file can hold too). */
export interface SftExtras {
  /** The resources to start from, an `llm` among them unless the `llm` option gives it; default: the store's latest. */
  readonly resources?: NamedResources;
  /** Where progress lines and the training command's output go (default: stderr); `quiet` silences both. */
  readonly log?: (line: string) => void;
}

/** The resources the rollouts run with, and which of them is the model. */
interface Published {
  readonly id: string;
  readonly resources: NamedResources;
  readonly llmName: string;
}

/** What an iteration selected and wrote; no dataset when there were no records (`error` says why). */
interface Exported {
  readonly keptRolloutIds: string[];
  readonly format: 'jsonl' | 'parquet';
  readonly records: number;
  readonly duplicates: number;
  readonly skipped: number;
  readonly dataset?: string;
  readonly error?: string;
}

const llmOf = (published: Published) => published.resources[published.llmName] as LlmResource;
const STOPPED = 'stopped by the signal';

export class SFT<T = unknown> implements Algorithm<T, SftResult> {
  readonly options: SftOptions;
  private readonly resources?: NamedResources;
  private readonly log: (line: string) => void;
  /** Scores the rollouts that bring no reward, while a run with judge options runs. */
  private judge?: RolloutJudge;

  /** Takes the options as given (defaults may be left out) and checks them: a TypeError names what is wrong. */
  constructor(options: SftOptionsInput & SftExtras) {
    const { resources, log, ...rest } = options;
    this.options = parseSftOptions(rest);
    checkJudgeOptions(this.options);
    this.resources = resources;
    this.log = log ?? ((line) => console.error(line));
  }

  async run({ store, source, train, val, signal }: AlgorithmContext<T>): Promise<SftResult> {
    const outDir = resolve(this.options.outDir);
    await this.checkOutDir(outDir);
    let current = await this.startingResources(store);
    const judgeSettings = await judgeSettingsOf(this.options);
    const run = await AlgorithmRun.start(store, 'sft', this.describedOptions(), current.id);
    if (judgeSettings && source)
      this.judge = new RolloutJudge(judgeSettings, store, source, run, (line) => this.say(line));
    const iterations: IterationRecord[] = [];
    const clock = runClock();
    const result = async (stopped: boolean, finalValMeanReward: number | null = null): Promise<SftResult> => ({
      runId: run.runId,
      iterations,
      resourcesId: current.id,
      model: llmOf(current).model,
      endpoint: llmOf(current).endpoint,
      finalValMeanReward,
      stopped,
      cost: await clock.spent(sourceOf(source), `(metadata->>'agl.sft.run') = ${sqlText(run.runId)}`),
    });
    try {
      for (let i = 1; i <= this.options.iterations; i++) {
        const { record, next } = await this.iteration(
          i,
          { store, source, train, val, signal },
          current,
          run.runId,
          join(outDir, `iteration-${i}`),
        );
        iterations.push(record);
        await recordIteration(run, record);
        if (record.status === 'stopped') {
          await run.end('cancelled');
          return await result(true);
        }
        if (!next) throw new SftError(failureMessage(record), record);
        current = next;
      }
      const evaluation = await this.evaluate(
        this.options.iterations + 1,
        { store, source, train, val, signal },
        current,
        run.runId,
      );
      if (evaluation) {
        iterations.push(evaluation);
        await recordIteration(run, evaluation);
      }
      if (signal.aborted) {
        await run.end('cancelled');
        return await result(true);
      }
      await run.end('succeeded');
      return await result(false, evaluation?.valMeanReward ?? null);
    } catch (error) {
      await run.end('failed').catch(() => {});
      throw error;
    } finally {
      this.judge = undefined;
    }
  }

  /** One iteration: rollouts, selection, dataset, training, publishing; `next` is the model it published. */
  private async iteration(
    i: number,
    context: AlgorithmContext<T>,
    current: Published,
    runId: string,
    dir: string,
  ): Promise<{ record: IterationRecord; next?: Published }> {
    const startTime = Date.now() / 1000;
    const ended = (record: Omit<IterationRecord, 'endTime'>): IterationRecord => ({
      ...record,
      endTime: Date.now() / 1000,
    });
    this.say(
      `iteration ${i}/${this.options.iterations}: ${context.train.length} task(s) x ${this.options.samplesPerTask} with ${llmOf(current).model}`,
    );
    const { samples, val } = await this.rollouts(i, context, current, runId);
    const ran = {
      iteration: i,
      startTime,
      usedResourcesId: current.id,
      rollouts: samples.length + val.length,
      succeeded: [...samples, ...val].filter((r) => r.status === 'succeeded').length,
      meanReward: meanReward(samples),
      valMeanReward: meanReward(val),
    };
    if (context.signal.aborted) return { record: ended({ ...ran, status: 'stopped', error: STOPPED }) };
    const exported = { ...ran, ...(await this.export(i, samples, dir)) };
    if (exported.dataset === undefined) return { record: ended({ ...exported, status: 'no_records' }) };

    const values: PlaceholderValues = {
      dataset: exported.dataset,
      output: join(dir, 'model'),
      iteration: String(i),
      model: llmOf(current).model,
      endpoint: llmOf(current).endpoint,
      records: String(exported.records),
      format: this.options.format,
    };
    const log = join(dir, 'train.log');
    const trained = await this.train(values, log, context.signal);
    const done = {
      ...exported,
      command: trained.command,
      exitCode: trained.exitCode,
      exitSignal: trained.signal,
      outputTail: trained.tail,
      log,
    };
    if (trained.stopped === 'signal') return { record: ended({ ...done, status: 'stopped', error: STOPPED }) };
    if (trained.exitCode !== 0 || trained.stopped === 'timeout') {
      const error = commandError(trained, this.options.trainTimeoutSeconds);
      return { record: ended({ ...done, status: 'failed', error }) };
    }
    const next = await this.publish(context.store, current, trained, values);
    this.say(`iteration ${i}: published ${llmOf(next).model} at ${llmOf(next).endpoint} (resources ${next.id})`);
    return {
      record: ended({
        ...done,
        status: 'trained',
        resourcesId: next.id,
        model: llmOf(next).model,
        endpoint: llmOf(next).endpoint,
      }),
      next,
    };
  }

  /** Keeps the best samples and writes their records to the iteration's dataset. */
  private async export(i: number, samples: Sample[], dir: string): Promise<Exported> {
    const kept = selectSamples(samples, this.options);
    const records: Records<object> = this.options.format === 'parquet' ? tokenRecords(kept) : chatRecords(kept);
    const counts = {
      keptRolloutIds: kept.map((s) => s.rolloutId),
      format: this.options.format,
      records: records.records.length,
      duplicates: records.duplicates,
      skipped: records.skipped.length,
    };
    this.say(
      `iteration ${i}: mean reward ${formatScore(meanReward(samples))}; kept ${kept.length} of ${samples.length} rollout(s): ${counts.records} record(s), ${counts.duplicates} duplicate(s), ${counts.skipped} call(s) skipped`,
    );
    if (records.records.length === 0) {
      return { ...counts, error: noRecordsReason(samples.length, kept.length, records) };
    }
    await mkdir(dir, { recursive: true });
    const dataset = join(dir, `dataset.${this.options.format}`);
    await writeDataset(dataset, this.options.format, records.records);
    return { ...counts, dataset };
  }

  /** The iteration's rollouts: every training task `samplesPerTask` times, every validation task once. */
  private async rollouts(
    i: number,
    { store, source, train, val, signal }: AlgorithmContext<T>,
    current: Published,
    runId: string,
  ): Promise<{ samples: Sample[]; val: RolloutRecord[] }> {
    const config =
      this.options.rolloutTimeoutSeconds === undefined
        ? undefined
        : { timeout_seconds: this.options.rolloutTimeoutSeconds };
    const request = (input: T, mode: 'train' | 'val', task: number, sample: number) => ({
      input,
      mode,
      resources_id: current.id,
      config,
      metadata: { 'agl.sft.run': runId, 'agl.sft.iteration': i, 'agl.sft.task': task, 'agl.sft.sample': sample },
    });
    const requests = [
      ...train.flatMap((input, task) =>
        Array.from({ length: this.options.samplesPerTask }, (_, sample) => request(input, 'train', task, sample)),
      ),
      ...val.map((input, task) => request(input, 'val', task, 0)),
    ];
    const finished = await runRollouts(store, sourceOf(source), requests, signal, this.judge);
    return {
      samples: finished
        .filter((r) => r.mode === 'train')
        .map((r) => ({ ...r, task: Number(r.metadata?.['agl.sft.task']) })),
      val: finished.filter((r) => r.mode === 'val'),
    };
  }

  /** After the last iteration: the last model on the validation tasks, when there are any. */
  private async evaluate(
    i: number,
    context: AlgorithmContext<T>,
    current: Published,
    runId: string,
  ): Promise<IterationRecord | undefined> {
    if (context.val.length === 0 || context.signal.aborted) return undefined;
    const startTime = Date.now() / 1000;
    this.say(`evaluating ${llmOf(current).model} on ${context.val.length} validation task(s)`);
    const { val } = await this.rollouts(i, { ...context, train: [] }, current, runId);
    const valMeanReward = meanReward(val);
    this.say(`validation mean reward ${formatScore(valMeanReward)}`);
    return {
      iteration: i,
      ...(context.signal.aborted ? { status: 'stopped', error: STOPPED } : { status: 'evaluated' }),
      startTime,
      endTime: Date.now() / 1000,
      usedResourcesId: current.id,
      rollouts: val.length,
      succeeded: val.filter((r) => r.status === 'succeeded').length,
      meanReward: null,
      valMeanReward,
    };
  }

  /** Runs the training command of one iteration, its output echoed unless quiet. */
  private async train(
    values: PlaceholderValues,
    logFile: string,
    signal: AbortSignal,
  ): Promise<CommandOutcome & { command: string }> {
    const command = fillPlaceholders(this.options.trainCmd, values, true);
    this.say(`iteration ${values.iteration}: training: ${command}`);
    const outcome = await runCommand(command, {
      env: placeholderEnv(values),
      logFile,
      timeoutMs: this.options.trainTimeoutSeconds === undefined ? undefined : this.options.trainTimeoutSeconds * 1000,
      graceMs: this.options.killGraceSeconds * 1000,
      signal,
      onLine: this.options.quiet ? undefined : (line) => this.log(`  | ${line}`),
    });
    return { ...outcome, command };
  }

  /** The trained model as a new resources version: where the command said it is served, else the templates. */
  private async publish(
    store: LightningStore,
    current: Published,
    trained: CommandOutcome,
    values: PlaceholderValues,
  ): Promise<Published> {
    const llm: LlmResource = {
      ...llmOf(current),
      endpoint: trained.endpoint || fillPlaceholders(this.options.endpointTemplate, values, false),
      model: trained.model || fillPlaceholders(this.options.modelTemplate, values, false),
    };
    const resources = { ...current.resources, [current.llmName]: llm };
    return { id: (await store.addResources(resources)).resources_id, resources, llmName: current.llmName };
  }

  /**
   * The resources of the first iteration: those given, else the store's latest, with `llm` from
   * the options when given; for Parquet, the gateway asks the model server for token ids.
   */
  private async startingResources(store: LightningStore): Promise<Published> {
    const latest: ResourcesUpdate | null = this.resources ? null : await store.getLatestResources();
    const resources: NamedResources = { ...(this.resources ?? latest?.resources) };
    const given = this.options.llm;
    let llmName = Object.keys(resources).find((name) => ['llm', 'proxy_llm'].includes(resources[name].resource_type));
    if (given) {
      llmName ??= 'llm';
      resources[llmName] = {
        resource_type: 'llm',
        endpoint: given.endpoint,
        model: given.model,
        api_key: given.apiKey,
        sampling_parameters: given.samplingParameters,
      };
    }
    if (llmName === undefined)
      throw new TypeError(
        'SFT needs a starting model: give the `llm` option (endpoint and model) or resources with an `llm` (agl train: --llm-model and --llm-endpoint, or either in the config file), or publish resources with an `llm` to the store first',
      );
    const llm = resources[llmName] as LlmResource;
    const askTokenIds = this.options.format === 'parquet' && llm.sampling_parameters?.return_token_ids === undefined;
    if (askTokenIds)
      resources[llmName] = { ...llm, sampling_parameters: { ...llm.sampling_parameters, return_token_ids: true } };
    if (latest && !given && !askTokenIds) return { id: latest.resources_id, resources, llmName };
    return { id: (await store.addResources(resources)).resources_id, resources, llmName };
  }

  /** Refuses to start over iteration folders that hold files already: an earlier run's datasets are kept. */
  private async checkOutDir(outDir: string): Promise<void> {
    for (let i = 1; i <= this.options.iterations; i++) {
      const dir = join(outDir, `iteration-${i}`);
      const entries = await readdir(dir).catch(() => []);
      if (entries.length > 0)
        throw new TypeError(`SFT: ${dir} holds files from an earlier run: choose another outDir, or remove it`);
    }
  }

  /** The options as the run's rollout records them: the API key left out. */
  private describedOptions(): Record<string, unknown> {
    const { llm, judgeApiKey, ...rest } = this.options;
    const judgeKey = judgeApiKey === undefined ? {} : { judgeApiKey: '(set)' };
    return llm
      ? { ...rest, ...judgeKey, llm: { ...llm, apiKey: llm.apiKey === null ? null : '(set)' } }
      : { ...rest, ...judgeKey };
  }

  private say(text: string): void {
    if (!this.options.quiet) this.log(`sft: ${text}`);
  }
}

/** An SFT algorithm from options as a config file or command line gives them (checked, defaults filled in). */
export function sftFromOptions<T = unknown>(options: unknown): SFT<T> {
  return new SFT<T>(options as SftOptionsInput);
}

/** SFT reads rewards and its cost with SQL. */
function sourceOf(source: QuerySource | undefined): QuerySource {
  if (!source)
    throw new TypeError('SFT reads rewards with SQL: run it with the Trainer (or give the context a `source`)');
  return source;
}

/** Writes the records: JSONL as they are, Parquet through DuckDB from a JSONL scratch file beside it. */
async function writeDataset(path: string, format: 'jsonl' | 'parquet', records: readonly object[]): Promise<void> {
  const lines = records.map((record) => `${JSON.stringify(record)}\n`).join('');
  if (format === 'jsonl') return writeFile(path, lines);
  const { jsonlToParquet, PARQUET_COLUMNS } = await import('../../adapters/parquet.js');
  const scratch = `${path}.jsonl.tmp`;
  await writeFile(scratch, lines);
  try {
    await jsonlToParquet(scratch, path, PARQUET_COLUMNS.trajectories);
  } finally {
    await rm(scratch, { force: true });
  }
}

function noRecordsReason(rollouts: number, kept: number, records: Records<object>): string {
  const skipped = records.skipped[0]
    ? `; ${records.skipped.length} call(s) skipped, e.g. ${records.skipped[0].reason}`
    : '';
  return `no training records: ${kept} of ${rollouts} rollout(s) kept${skipped}`;
}

function commandError(outcome: CommandOutcome, timeoutSeconds: number | undefined): string {
  if (outcome.stopped === 'timeout')
    return `the training command ran past its timeout of ${timeoutSeconds} s and was stopped`;
  return outcome.signal
    ? `the training command was killed by ${outcome.signal}`
    : `the training command exited with code ${outcome.exitCode}`;
}

/** The SftError message: what went wrong, and the command's last output. */
function failureMessage(record: IterationRecord): string {
  const tail = record.outputTail
    ? `\n--- its output, last lines (all of it: ${record.log}) ---\n${record.outputTail}`
    : '';
  const dataset = record.dataset ? ` (dataset kept: ${record.dataset})` : '';
  return `SFT iteration ${record.iteration}: ${record.error}${dataset}${tail}`;
}
