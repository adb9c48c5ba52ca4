import { SFT } from '../../api/semconv.js';
import type { AlgorithmRun, RunAttribute } from '../shared/algorithm-run.js';

/**
 * What an SFT run leaves in the store besides its rollouts and resources versions: spans of the
 * run's own rollout (shared/algorithm-run.ts), one per iteration, `agl.sft.iteration`, whose attributes
 * say what the iteration selected, exported, ran and published. The `sft_iterations` view
 * (store/views.ts) reads them: change the names there and here together.
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
  return run.record(SFT.iterationSpan, attributesOf(record), {
    startTime: record.startTime,
    endTime: record.endTime,
    error: record.error,
  });
}

/** The span attributes of a record: each field under its `agl.sft.*` key (those not set are left out). */
function attributesOf(record: IterationRecord): Record<string, RunAttribute> {
  return {
    [SFT.iteration]: record.iteration,
    [SFT.status]: record.status,
    [SFT.usedResourcesId]: record.usedResourcesId,
    [SFT.rollouts]: record.rollouts,
    [SFT.succeeded]: record.succeeded,
    [SFT.meanReward]: record.meanReward,
    [SFT.valMeanReward]: record.valMeanReward,
    [SFT.keptRollouts]: record.keptRolloutIds?.length,
    [SFT.keptRolloutIds]: record.keptRolloutIds,
    [SFT.dataset]: record.dataset,
    [SFT.format]: record.format,
    [SFT.records]: record.records,
    [SFT.duplicates]: record.duplicates,
    [SFT.skipped]: record.skipped,
    [SFT.command]: record.command,
    [SFT.exitCode]: record.exitCode,
    [SFT.exitSignal]: record.exitSignal,
    [SFT.outputTail]: record.outputTail,
    [SFT.log]: record.log,
    [SFT.resourcesId]: record.resourcesId,
    [SFT.model]: record.model,
    [SFT.endpoint]: record.endpoint,
    [SFT.error]: record.error,
  };
}
