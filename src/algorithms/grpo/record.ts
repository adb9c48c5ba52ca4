import { GRPO_STEP } from '../../api/run-records.js';
import type { AlgorithmRun, RunAttribute } from '../shared/algorithm-run.js';
import { DROP_REASONS, type DropCounts } from './batch.js';

/**
 * What a GRPO run leaves in the store besides its rollouts and model versions: one span of the
 * run's own rollout per step (shared/algorithm-run.ts), `agl.grpo.step`, whose attributes say what the
 * step ran, kept, handed over and got back. Its fields, their attributes and the
 * `training_steps` view's columns are declared once, in src/api/run-records.ts.
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
  return run.record(GRPO_STEP.span, attributesOf(record), {
    startTime: record.startTime,
    endTime: record.endTime,
    error: record.error,
  });
}

/** The span attributes of a record: each field under its `agl.grpo.*` key, a drop count per reason. */
function attributesOf(record: StepRecord): Record<string, RunAttribute> {
  const { dropped, ...attributes } = GRPO_STEP.attributes;
  const fields: Partial<Record<keyof typeof attributes, RunAttribute>> = {
    ...record,
    metrics: record.metrics === undefined ? undefined : JSON.stringify(record.metrics),
  };
  return Object.fromEntries(
    Object.entries(GRPO_STEP.attributes).flatMap(([field, key]): [string, RunAttribute][] =>
      key === dropped
        ? DROP_REASONS.map((reason) => [`${dropped}${reason}`, record.dropped[reason]])
        : [[key, fields[field as keyof typeof fields]]],
    ),
  );
}
