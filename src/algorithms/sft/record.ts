import { SFT_ITERATION } from '../../api/run-records.js';
import type { AlgorithmRun, RunAttribute } from '../shared/algorithm-run.js';

/**
 * What an SFT run leaves in the store besides its rollouts and resources versions: spans of the
 * run's own rollout (shared/algorithm-run.ts), one per iteration, `agl.sft.iteration`, whose attributes
 * say what the iteration selected, exported, ran and published. Its fields, their attributes and
 * the `sft_iterations` view's columns are declared once, in src/api/run-records.ts.
 */

/** How an iteration ended. */
export type IterationStatus = 'trained' | 'failed' | 'no_records' | 'stopped' | 'evaluated';

export interface IterationRecord {
  readonly iteration: number;
  readonly status: IterationStatus;
  /** Seconds since the epoch. */
  readonly startTime: number;
  readonly endTime: number;
  /** The resources version its rollouts ran with. */
  readonly usedResourcesId: string;
  readonly rollouts: number;
  readonly succeeded: number;
  readonly meanReward: number | null;
  readonly valMeanReward: number | null;
  readonly keptRolloutIds?: readonly string[];
  readonly dataset?: string;
  readonly format?: string;
  readonly records?: number;
  readonly duplicates?: number;
  readonly skipped?: number;
  readonly command?: string;
  readonly exitCode?: number | null;
  readonly exitSignal?: string | null;
  readonly outputTail?: string;
  readonly log?: string;
  /** The resources version it published: the trained model. */
  readonly resourcesId?: string;
  readonly model?: string;
  readonly endpoint?: string;
  readonly error?: string;
}

/** Records an iteration as a span of the run, over the iteration's time; one that went wrong is an ERROR span. */
export function recordIteration(run: AlgorithmRun, record: IterationRecord): Promise<void> {
  return run.record(SFT_ITERATION.span, attributesOf(record), {
    startTime: record.startTime,
    endTime: record.endTime,
    error: record.error,
  });
}

/** The span attributes of a record: each field under its `agl.sft.*` key (those not set are left out). */
function attributesOf(record: IterationRecord): Record<string, RunAttribute> {
  const fields: Partial<Record<keyof typeof SFT_ITERATION.attributes, RunAttribute>> = {
    ...record,
    keptRollouts: record.keptRolloutIds?.length,
  };
  return Object.fromEntries(
    Object.entries(SFT_ITERATION.attributes).map(([field, key]) => [key, fields[field as keyof typeof fields]]),
  );
}
