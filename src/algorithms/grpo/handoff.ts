import type { TrainingDone, TrainingDoneAnswer } from '../../api/training.js';
import type { TrainingBatch } from './arrow.js';

/**
 * How a GRPO batch reaches the trainer and its done comes back: over HTTP (queue.ts, the
 * server's /v1/agl/training/ routes) or as files (files.ts, `batchesDir`).
 */

/**
 * Applies a trainer's done to the run (publishes its model); answers what the trainer is told.
 * Throws InvalidQueryError for a done the run refuses (a model version used before).
 */
export type ApplyDone = (batch: TrainingBatch, done: TrainingDone) => Promise<TrainingDoneAnswer>;

export interface BatchHandoff {
  /**
   * Makes `batch` available to the trainer (serialized, written); then `done` settles with the
   * trainer's done once it was applied, or null when `signal` stopped the wait first.
   */
  offer(batch: TrainingBatch, signal: AbortSignal): Promise<{ done: Promise<TrainingDone | null> }>;
  /** Ends the hand-off: waiting trainers get no batch, batches not done are withdrawn. */
  close(): void;
}
