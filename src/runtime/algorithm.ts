import { findFinalReward } from '../instrumentation/reward-spans.js';
import type { LightningStore } from '../lightning-store.js';
import type { NamedResources, RolloutMode, RolloutStatus } from '../types.js';

/** What an algorithm gets from the Trainer: the store its runners work from, and the tasks. */
export interface AlgorithmContext<T> {
  readonly store: LightningStore;
  readonly train: readonly T[];
  readonly val: readonly T[];
  readonly signal: AbortSignal;
}

/** An algorithm drives training through the store: it publishes resources, enqueues rollouts and reads what they recorded. */
export interface Algorithm<T = unknown, R = unknown> {
  run(context: AlgorithmContext<T>): Promise<R>;
}

export interface RolloutOutcome {
  readonly rollout_id: string;
  readonly mode: RolloutMode | null;
  readonly status: RolloutStatus;
  /** The rollout's final reward (the last one its spans carry), else null. */
  readonly reward: number | null;
}

export interface BaselineResult {
  readonly rollouts: RolloutOutcome[];
  readonly total: number;
  readonly succeeded: number;
  readonly failed: number;
  /** Mean of the rewards that exist, null when none does. */
  readonly meanReward: number | null;
}

/** The final rewards of rollouts, read from their spans in sequence order. */
export async function finalRewards(store: LightningStore, rolloutIds: readonly string[]): Promise<Map<string, number | null>> {
  const rewards = new Map<string, number | null>();
  for (const rolloutId of rolloutIds) {
    const { items } = await store.querySpans({ rollout_id: rolloutId, sort_by: 'sequence_id', sort_order: 'asc' });
    rewards.set(rolloutId, findFinalReward(items));
  }
  return rewards;
}

/**
 * Runs every task once (train, then val) with the given resources and reports each rollout's
 * outcome: the algorithm to try an agent with, and the yardstick other algorithms beat.
 */
export class Baseline<T = unknown> implements Algorithm<T, BaselineResult> {
  constructor(private readonly options: { resources?: NamedResources } = {}) {}

  async run({ store, train, val, signal }: AlgorithmContext<T>): Promise<BaselineResult> {
    const resourcesId = this.options.resources ? (await store.addResources(this.options.resources)).resources_id : undefined;
    const requests = [
      ...train.map((input) => ({ input, mode: 'train' as const, resources_id: resourcesId })),
      ...val.map((input) => ({ input, mode: 'val' as const, resources_id: resourcesId })),
    ];
    const queued = requests.length ? await store.enqueueManyRollouts(requests) : [];
    const ids = queued.map((r) => r.rollout_id);
    const done = new Map<string, { mode: RolloutMode | null; status: RolloutStatus }>();
    while (done.size < ids.length && !signal.aborted) {
      for (const rollout of await store.waitForRollouts(ids.filter((id) => !done.has(id)), 1)) done.set(rollout.rollout_id, rollout);
    }
    const rewards = await finalRewards(store, [...done.keys()]);
    const rollouts = ids.filter((id) => done.has(id)).map((id) => ({ rollout_id: id, mode: done.get(id)!.mode, status: done.get(id)!.status, reward: rewards.get(id) ?? null }));
    const values = rollouts.map((r) => r.reward).filter((r): r is number => r !== null);
    return {
      rollouts,
      total: rollouts.length,
      succeeded: rollouts.filter((r) => r.status === 'succeeded').length,
      failed: rollouts.filter((r) => r.status === 'failed').length,
      meanReward: values.length ? values.reduce((a, b) => a + b, 0) / values.length : null,
    };
  }
}
