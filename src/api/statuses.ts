/** The states of rollouts, attempts and workers, and the modes of rollouts, as Agent Lightning v0.x names them. */

export const ROLLOUT_STATUSES = [
  'queuing',
  'preparing',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'requeuing',
] as const;
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number];

export const ATTEMPT_STATUSES = [
  'preparing',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'timeout',
  'unresponsive',
] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export const ROLLOUT_MODES = ['train', 'val', 'test'] as const;
export type RolloutMode = (typeof ROLLOUT_MODES)[number];

export const WORKER_STATUSES = ['idle', 'busy', 'unknown'] as const;
export type WorkerStatus = (typeof WORKER_STATUSES)[number];

/** Rollouts in these statuses are done: waitForRollouts returns them. */
export const FINISHED_ROLLOUT_STATUSES: readonly RolloutStatus[] = ['succeeded', 'failed', 'cancelled'];
