import { randomBytes } from 'node:crypto';
import type { QuerySource } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import { computeAdvantages } from './advantages.js';
import type { TrainingBatch } from './arrow.js';
import {
  buildRows,
  mergeBuilt,
  noDrops,
  usableGroups,
  type BuiltRows,
  type DropCounts,
  type StepRollout,
} from './batch.js';
import { llmOf, type ModelVersion, type ModelVersions } from './models.js';
import type { GrpoOptions } from './options.js';
import type { StepRecord } from './record.js';
import { runGroups, type Group } from './rollouts.js';
import type { JudgedAttempt, RolloutJudge } from '../judge/rollouts.js';
import type { Batches } from '../shared/random.js';

/**
 * One step up to its batch: `batchSize` tasks, `groupSize` rollouts each, run with the current
 * model; their rows checked (batch.ts); while fewer than `minGroups` groups are usable, more
 * tasks run (at most `maxTopUps` waves), rather than a thin batch; then the advantages.
 */

interface StepContext<T> {
  readonly step: number;
  readonly runId: string;
  readonly store: LightningStore;
  readonly source: QuerySource;
  readonly train: readonly T[];
  readonly tasks: Batches;
  readonly models: ModelVersions;
  /** Scores the groups' rollouts that bring no reward, when the run has a judge. */
  readonly judge?: RolloutJudge;
  readonly options: GrpoOptions;
  readonly signal: AbortSignal;
  /** Rows of model versions before this index are stale (read when a wave's rows are built). */
  readonly oldestVersionIndex: () => number;
  readonly log: (line: string) => void;
}

/** What the step's batch came from; `batch` is missing when the step was stopped or failed. */
export interface PreparedStep {
  readonly batch?: TrainingBatch;
  readonly record: Omit<StepRecord, 'status' | 'endTime' | 'trainerSeconds'>;
  readonly stopped: boolean;
  /** Why the step has no batch, when it was not stopped. */
  readonly error?: string;
}

const seconds = (since: number) => (performance.now() - since) / 1000;

export async function prepareStep<T>(context: StepContext<T>): Promise<PreparedStep> {
  const { options, step } = context;
  const startTime = Date.now() / 1000;
  const minGroups = options.minGroups ?? options.batchSize;
  const waves = await runWaves(context, minGroups);
  const { built } = waves;
  const usable = usableGroups(built).size;
  const started = performance.now();
  const finished =
    usable >= minGroups && !context.signal.aborted
      ? finishBatch(step, built, options, context.models.current)
      : undefined;
  const model = context.models.all[finished?.newestIndex ?? context.models.current.index];
  const record = {
    ...stepFigures(built),
    singleSampleGroups: finished?.singleSampleGroups ?? 0,
    zeroVarianceGroups: finished?.zeroVarianceGroups ?? 0,
    step,
    startTime,
    batchId: finished?.batch.batchId,
    modelVersion: model.version,
    resourcesId: model.resourcesId,
    rollouts: waves.rollouts,
    topUps: waves.topUps,
    rolloutSeconds: waves.rolloutSeconds,
    buildSeconds: waves.buildSeconds + seconds(started),
  };
  if (context.signal.aborted) return { record, stopped: true };
  if (!finished)
    return {
      record,
      stopped: false,
      error: `step ${step}: only ${usable} usable group(s) of the ${minGroups} needed after ${options.maxTopUps} extra round(s) of tasks (${dropSummary(built)})`,
    };
  return { batch: finished.batch, record, stopped: false };
}

/** The step's waves of groups: the first of `batchSize` tasks, then more while too few groups are usable. */
async function runWaves<T>(context: StepContext<T>, minGroups: number) {
  const { options, step } = context;
  const waves = {
    built: { rows: [], kept: [], dropped: noDrops(), truncated: 0, filledRewards: 0 } as BuiltRows,
    rollouts: 0,
    topUps: 0,
    rolloutSeconds: 0,
    buildSeconds: 0,
  };
  let groupCount = 0;
  let wanted = options.batchSize;
  for (;;) {
    const groups: Group<T>[] = context.tasks.next(wanted).map((task) => ({
      groupId: `${context.runId}:${step}:${groupCount++}`,
      task,
      input: context.train[task],
    }));
    let started = performance.now();
    const wave = await runGroups(
      context.store,
      groups,
      {
        runId: context.runId,
        step,
        groupSize: options.groupSize,
        model: context.models.current,
        timeoutSeconds: options.rolloutTimeoutSeconds,
      },
      context.signal,
    );
    waves.rolloutSeconds += seconds(started);
    waves.rollouts += wave.length;
    if (context.signal.aborted) return waves;
    started = performance.now();
    if (context.judge) await judgeWave(context.judge, wave, context);
    const settings = { ...options, oldestVersionIndex: context.oldestVersionIndex() };
    waves.built = mergeBuilt(waves.built, await buildRows(context.source, wave, settings));
    waves.buildSeconds += seconds(started);
    const usable = usableGroups(waves.built).size;
    if (usable >= minGroups || waves.topUps === options.maxTopUps) return waves;
    wanted = minGroups - usable;
    waves.topUps++;
    context.log(
      `step ${step}: ${usable} of ${minGroups} groups usable (${dropSummary(waves.built)}); running ${wanted} more task(s)`,
    );
  }
}

/** Scores the wave's succeeded rollouts that brought no reward, group by group; those it cannot score stay unscored (no_reward). */
async function judgeWave<T>(judge: RolloutJudge, wave: readonly StepRollout[], context: StepContext<T>) {
  const groups = new Map<string, JudgedAttempt[]>();
  for (const r of wave) {
    if (r.status !== 'succeeded' || r.attemptId === null) continue;
    const group = groups.get(r.groupId) ?? [];
    group.push({ rolloutId: r.rolloutId, attemptId: r.attemptId });
    groups.set(r.groupId, group);
  }
  const { scored, unscored } = await judge.scoreGroups([...groups.values()], context.signal);
  if (scored + unscored > 0)
    context.log(
      `step ${context.step}: the judge scored ${scored} rollout(s)${unscored ? `, left ${unscored} unscored` : ''} (${judge.tokens} judge tokens so far)`,
    );
}

/** The batch of the kept rows, with their advantages, and the group counts of the estimator. */
function finishBatch(step: number, built: BuiltRows, options: GrpoOptions, model: ModelVersion) {
  const { values, singleSampleGroups, zeroVarianceGroups } = computeAdvantages(built.rows, options);
  const newest = built.kept.reduce((a, b) => (b.versionIndex > a.versionIndex ? b : a));
  const batch: TrainingBatch = {
    batchId: `bt-${randomBytes(6).toString('hex')}`,
    step,
    modelVersion: newest.modelVersion,
    estimator: options.estimator,
    aggregation: options.aggregation,
    rows: built.rows,
    advantages: values,
    settings: {
      steps: options.steps,
      batchSize: options.batchSize,
      groupSize: options.groupSize,
      ...temperatureOf(model),
    },
  };
  return { batch, newestIndex: newest.versionIndex, singleSampleGroups, zeroVarianceGroups };
}

/** The temperature the gateway adds to the model's calls, when its sampling parameters set a number. */
function temperatureOf(model: ModelVersion): { temperature?: number } {
  const { temperature } = llmOf(model).sampling_parameters ?? {};
  return typeof temperature === 'number' && Number.isFinite(temperature) ? { temperature } : {};
}

/** The figures of a step's record that its kept rollouts and rows give. */
function stepFigures(built: BuiltRows) {
  const rewardOf = new Map(built.rows.map((row) => [row.rolloutId, row.rolloutReward]));
  const rewards = built.kept.map((r) => rewardOf.get(r.rolloutId) ?? 0);
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  let tokens = 0;
  let trainedTokens = 0;
  for (const row of built.rows) {
    tokens += row.promptIds.length + row.responseIds.length;
    for (const bit of row.responseMask) trainedTokens += bit;
  }
  return {
    keptRollouts: built.kept.length,
    groups: usableGroups(built).size,
    rows: built.rows.length,
    tokens,
    trainedTokens,
    rewardMean: mean,
    rewardStd: mean === null ? null : Math.sqrt(rewards.reduce((sum, r) => sum + (r - mean) ** 2, 0) / rewards.length),
    rewardMin: rewards.length ? Math.min(...rewards) : null,
    rewardMax: rewards.length ? Math.max(...rewards) : null,
    dropped: built.dropped,
    truncated: built.truncated,
    filledRewards: built.filledRewards,
  };
}

/** "2 no_reward, 1 failed": the rollouts left out so far, by reason. */
export function dropSummary({ dropped }: { dropped: DropCounts }): string {
  const parts = Object.entries(dropped)
    .filter(([, n]) => n > 0)
    .map(([reason, n]) => `${n} ${reason}`);
  return parts.length ? `left out: ${parts.join(', ')}` : 'none left out';
}
