import { finalRewards } from '../adapters/final-rewards.js';
import type { NamedResources } from '../api/types.js';
import {
  meanReward,
  waitUntilFinished,
  type Algorithm,
  type AlgorithmContext,
  type RolloutOutcome,
} from './algorithm.js';

export interface BaselineResult {
  readonly rollouts: RolloutOutcome[];
  readonly total: number;
  readonly succeeded: number;
  readonly failed: number;
  /** Mean of the rewards that exist, null when none does. */
  readonly meanReward: number | null;
}

/**
 * Runs every task once (train, then val) with the given resources and reports each rollout's
 * outcome: the algorithm to try an agent with, and the yardstick other algorithms beat.
 */
export class Baseline<T = unknown> implements Algorithm<T, BaselineResult> {
  constructor(private readonly options: { resources?: NamedResources } = {}) {}

  async run({ store, source, train, val, signal }: AlgorithmContext<T>): Promise<BaselineResult> {
    if (!source)
      throw new TypeError(
        'the Baseline reads rewards with SQL: run it with the Trainer (or give the context a `source`)',
      );
    const resourcesId = this.options.resources
      ? (await store.addResources(this.options.resources)).resources_id
      : undefined;
    const requests = [
      ...train.map((input) => ({ input, mode: 'train' as const, resources_id: resourcesId })),
      ...val.map((input) => ({ input, mode: 'val' as const, resources_id: resourcesId })),
    ];
    const queued = requests.length ? await store.enqueueManyRollouts(requests) : [];
    const ids = queued.map((r) => r.rollout_id);
    const done = await waitUntilFinished(store, ids, signal);
    const rewards = await finalRewards(source, [...done.keys()], 'rollout');
    const rollouts = ids.flatMap((id) => {
      const rollout = done.get(id);
      return rollout
        ? [{ rollout_id: id, mode: rollout.mode, status: rollout.status, reward: rewards.get(id) ?? null }]
        : [];
    });
    return {
      rollouts,
      total: rollouts.length,
      succeeded: rollouts.filter((r) => r.status === 'succeeded').length,
      failed: rollouts.filter((r) => r.status === 'failed').length,
      meanReward: meanReward(rollouts),
    };
  }
}
