import { readable, rewardsFrom } from '../store/derived.js';
import { sqlText } from '../store/sql.js';
import { allRows, type QuerySource } from './source.js';

/**
 * The final reward of each rollout, by the `rewards` view's reading of reward spans (derived.ts)
 * and `findFinalReward`'s rule (the last primary reward in span order), in one query over the
 * spans of these rollouts alone: right after a batch ends, the view would also read every span
 * the deriver has not reached yet (300-400 ms a batch, against a few ms).
 */
export function finalRewardsOf(source: QuerySource, rolloutIds: readonly string[]): Promise<Map<string, number>> {
  return finalRewardsBy(source, rolloutIds, 'rollout_id');
}

/** The same, per attempt (by attempt id): what each attempt of these rollouts ended with. */
export function finalRewardsOfAttempts(
  source: QuerySource,
  rolloutIds: readonly string[],
): Promise<Map<string, number>> {
  return finalRewardsBy(source, rolloutIds, 'attempt_id');
}

async function finalRewardsBy(
  source: QuerySource,
  rolloutIds: readonly string[],
  key: 'rollout_id' | 'attempt_id',
): Promise<Map<string, number>> {
  const rewards = new Map<string, number>();
  if (rolloutIds.length === 0) return rewards;
  const spans = `(SELECT * FROM spans WHERE rollout_id IN (${rolloutIds.map(sqlText).join(', ')}) AND ${readable()})`;
  const sql = `SELECT ${key} AS id, arg_max(value, sequence_id) AS reward
    FROM (${rewardsFrom(spans)}) AS r(rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, time, name, value, is_primary)
    WHERE is_primary AND value IS NOT NULL AND ${key} IS NOT NULL GROUP BY ${key}`;
  for (const row of await allRows(source, sql)) {
    if (typeof row.reward === 'number') rewards.set(String(row.id), row.reward);
  }
  return rewards;
}
