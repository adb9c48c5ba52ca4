import type * as z from 'zod';
import type * as requests from './requests.js';

/**
 * The hand-off of training batches from an algorithm (GRPO) to an external trainer over HTTP
 * (docs/training.md): the server's routes `GET /v1/agl/training/batches/next` and
 * `POST /v1/agl/training/batches/{batch_id}/done` answer through this interface, which the
 * algorithm implements; the server knows nothing else of it.
 */

/** The body of a done: the trainer's metrics, and the model it made, if any. */
export type TrainingDone = z.output<typeof requests.trainingDoneBody>;

/** A batch as handed out: its rows are one Arrow IPC stream, the same bytes every time. */
export interface OfferedBatch {
  readonly batchId: string;
  readonly step: number;
  /** The newest model version among the batch's rows. */
  readonly modelVersion: string;
  /** Seconds the trainer has to say done before the batch is handed out again. */
  readonly leaseSeconds: number;
  readonly body: Uint8Array;
}

/** What a done answers. */
export interface TrainingDoneAnswer {
  readonly batch_id: string;
  readonly step: number;
  /** The model version the next rollouts run with. */
  readonly model_version: string;
}

export interface TrainingBatchSource {
  /**
   * The next batch to train on, leased to the caller; null when none is ready within
   * `waitSeconds` or once `signal` is aborted (the caller went away).
   */
  next(waitSeconds: number, signal: AbortSignal): Promise<OfferedBatch | null>;
  /**
   * Ends a batch: NotFoundError for an unknown batch id, ConflictError for one already done,
   * InvalidQueryError for a model the algorithm cannot take (a version used before).
   */
  done(batchId: string, done: TrainingDone): Promise<TrainingDoneAnswer>;
}
