import { GRPO } from '../../api/semconv.js';
import type { AlgorithmRun, RunAttribute } from '../shared/algorithm-run.js';
import { DROP_REASONS, type DropCounts } from './batch.js';

/**
 * What a GRPO run leaves in the store besides its rollouts and model versions: one span of the
 * run's own rollout per step (shared/algorithm-run.ts), `agl.grpo.step`, whose attributes say what the
 * step ran, kept, handed over and got back. The `training_steps` view (store/views.ts) reads
 * them: change the names there and here together.
 */

/** How a step ended: trained (the trainer said done), stopped (Ctrl-C), failed (too few usable groups). */
export type StepStatus = 'trained' | 'stopped' | 'failed';

export interface StepRecord {
  readonly step: number;
  readonly status: StepStatus;
  /** Seconds since the epoch. */
  readonly startTime: number;
  readonly endTime: number;
  readonly batchId?: string;
  /** The newest model version among the batch's rows, and its resources version. */
  readonly modelVersion: string;
  readonly resourcesId: string;
  /** The model the trainer's done published, when it gave one. */
  readonly nextModelVersion?: string;
  readonly nextResourcesId?: string;
  /** Rollouts run (every wave), kept, and the groups with a kept rollout. */
  readonly rollouts: number;
  readonly keptRollouts: number;
  readonly groups: number;
  /** Waves of extra tasks run to reach minGroups. */
  readonly topUps: number;
  readonly rows: number;
  /** Prompt and response tokens of the rows, and the response tokens trained on (mask 1). */
  readonly tokens: number;
  readonly trainedTokens: number;
  /** Over the kept rollouts' rewards (std: population). */
  readonly rewardMean: number | null;
  readonly rewardStd: number | null;
  readonly rewardMin: number | null;
  readonly rewardMax: number | null;
  readonly singleSampleGroups: number;
  readonly zeroVarianceGroups: number;
  readonly dropped: DropCounts;
  readonly truncated: number;
  readonly filledRewards: number;
  readonly rolloutSeconds: number;
  readonly buildSeconds: number;
  readonly trainerSeconds: number;
  /** The trainer's metrics from its done. */
  readonly metrics?: Record<string, number>;
  readonly error?: string;
}

/** Records a step as a span of the run, over the step's time; one that went wrong is an ERROR span. */
export function recordStep(run: AlgorithmRun, record: StepRecord): Promise<void> {
  return run.record(GRPO.stepSpan, attributesOf(record), {
    startTime: record.startTime,
    endTime: record.endTime,
    error: record.error,
  });
}

function attributesOf(record: StepRecord): Record<string, RunAttribute> {
  return {
    [GRPO.step]: record.step,
    [GRPO.status]: record.status,
    [GRPO.batchId]: record.batchId,
    [GRPO.modelVersion]: record.modelVersion,
    [GRPO.resourcesId]: record.resourcesId,
    [GRPO.nextModelVersion]: record.nextModelVersion,
    [GRPO.nextResourcesId]: record.nextResourcesId,
    [GRPO.rollouts]: record.rollouts,
    [GRPO.keptRollouts]: record.keptRollouts,
    [GRPO.groups]: record.groups,
    [GRPO.topUps]: record.topUps,
    [GRPO.rows]: record.rows,
    [GRPO.tokens]: record.tokens,
    [GRPO.trainedTokens]: record.trainedTokens,
    [GRPO.rewardMean]: record.rewardMean,
    [GRPO.rewardStd]: record.rewardStd,
    [GRPO.rewardMin]: record.rewardMin,
    [GRPO.rewardMax]: record.rewardMax,
    [GRPO.singleSampleGroups]: record.singleSampleGroups,
    [GRPO.zeroVarianceGroups]: record.zeroVarianceGroups,
    ...Object.fromEntries(DROP_REASONS.map((reason) => [`${GRPO.droppedPrefix}${reason}`, record.dropped[reason]])),
    [GRPO.truncated]: record.truncated,
    [GRPO.filledRewards]: record.filledRewards,
    [GRPO.rolloutSeconds]: record.rolloutSeconds,
    [GRPO.buildSeconds]: record.buildSeconds,
    [GRPO.trainerSeconds]: record.trainerSeconds,
    [GRPO.metrics]: record.metrics === undefined ? undefined : JSON.stringify(record.metrics),
    [GRPO.error]: record.error,
  };
}
