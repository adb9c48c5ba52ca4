/** Each rollout's (or attempt's) final reward, read by the one rule of sql/final-rewards.ts. */
import { finalRewardsSql, type RewardScope } from '../sql/final-rewards.js';
import { allRows, type QuerySource } from './source.js';

/**
 * The final reward of each of these rollouts (`per: 'rollout'`, by rollout id) or of each of
 * their attempts (`per: 'attempt'`, by attempt id); none where nothing recorded a reward.
 */
export async function finalRewards(
  source: QuerySource,
  rolloutIds: readonly string[],
  per: RewardScope = 'rollout',
): Promise<Map<string, number>> {
  const rewards = new Map<string, number>();
  if (rolloutIds.length === 0) return rewards;
  for (const row of await allRows(source, finalRewardsSql(per, rolloutIds))) {
    const id = per === 'rollout' ? row.rollout_id : row.attempt_id;
    if (typeof id === 'string' && typeof row.reward === 'number') rewards.set(id, row.reward);
  }
  return rewards;
}
