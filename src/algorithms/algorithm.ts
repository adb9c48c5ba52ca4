import type { QuerySource } from '../adapters/source.js';
import type { LightningStore } from '../api/lightning-store.js';
import type { TrainingBatchSource } from '../api/training.js';
import type { Rollout, RolloutMode, RolloutStatus } from '../api/types.js';

/** What an algorithm gets from the Trainer: the store its runners work from, and the tasks. */
export interface AlgorithmContext<T> {
  readonly store: LightningStore;
  readonly train: readonly T[];
  readonly val: readonly T[];
  readonly signal: AbortSignal;
  /**
   * Read-only SQL over the same store (the adapters read through it: TraceToMessages ...). The
   * Trainer always gives one; an algorithm that needs it says so when it is missing.
   */
  readonly source?: QuerySource;
  /** The agl server the Trainer started (REST API, gateway, training batches), when it serves one. */
  readonly serverUrl?: string;
}

/** An algorithm drives training through the store: it publishes resources, enqueues rollouts and reads what they recorded. */
export interface Algorithm<T = unknown, R = unknown> {
  run(context: AlgorithmContext<T>): Promise<R>;
  /**
   * Training batches the Trainer's server is to serve under /v1/agl/training/ while the algorithm
   * runs (GRPO's hand-off to an external trainer); most algorithms have none.
   */
  readonly trainingBatches?: TrainingBatchSource;
}

export interface RolloutOutcome {
  readonly rollout_id: string;
  readonly mode: RolloutMode | null;
  readonly status: RolloutStatus;
  /** The rollout's final reward (the last one its spans carry: adapters/final-rewards.ts), else null. */
  readonly reward: number | null;
}

/**
 * Waits until every rollout of `ids` finished, or, when a `signal` is given, until it is aborted
 * (a stop leaves the rest to the runners). Answers the finished ones by id.
 */
export async function waitUntilFinished(
  store: LightningStore,
  ids: readonly string[],
  signal?: AbortSignal,
): Promise<Map<string, Rollout>> {
  const finished = new Map<string, Rollout>();
  while (finished.size < ids.length && !signal?.aborted) {
    // A second at a time, so that a stop is seen soon.
    for (const rollout of await store.waitForRollouts(
      ids.filter((id) => !finished.has(id)),
      1,
    ))
      finished.set(rollout.rollout_id, rollout);
  }
  return finished;
}

/** The mean of the rewards that exist, null when none does. */
export function meanReward(records: readonly { reward: number | null }[]): number | null {
  const values = records.map((r) => r.reward).filter((r): r is number => r !== null);
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
}
