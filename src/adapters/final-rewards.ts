import { readable, rewardsFrom } from '../sql/derived.js';
import { sqlText } from '../sql/literals.js';
import { allRows, type QuerySource } from './source.js';

/**
 * The final reward of each rollout, by the `rewards` view's reading of reward spans (derived.ts)
 * and `findFinalReward`'s rule (the last primary reward in span order), in one query over the
 * spans of these rollouts alone: right after a batch ends, the view would also read every span
 * the deriver has not reached yet (300-400 ms a batch, against a few ms).
 */
export async function finalRewardsOf(source: QuerySource, rolloutIds: readonly string[]): Promise<Map<string, number>> {
  if (rolloutIds.length === 0) return new Map();
  const spans = `(SELECT * FROM spans WHERE rollout_id IN (${rolloutIds.map(sqlText).join(', ')}) AND ${readable()})`;
  const rows = `(${rewardsFrom(spans)}) AS r(rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, time, name, value, is_primary)`;
  return finalRewardsFrom(source, rows, 'rollout_id');
}

/**
 * The final reward of each attempt of these rollouts (by attempt id), by the same rule, read from
 * `reward_rows`: what the deriver parsed already, and the spans after it. The spans of an agent
 * with token ids are large (thousands of ids in an answer): parsing every span of a GRPO batch's
 * rollouts again, as finalRewardsOf does, cost more than the rest of the batch's queries.
 */
export async function finalRewardsOfAttempts(
  source: QuerySource,
  rolloutIds: readonly string[],
): Promise<Map<string, number>> {
  if (rolloutIds.length === 0) return new Map();
  const rows = `(SELECT * FROM reward_rows WHERE rollout_id IN (${rolloutIds.map(sqlText).join(', ')}))`;
  return finalRewardsFrom(source, rows, 'attempt_id');
}

/** The last primary reward (by sequence id) of each `key` in `rewardRows` (shaped like reward_rows). */
async function finalRewardsFrom(
  source: QuerySource,
  rewardRows: string,
  key: 'rollout_id' | 'attempt_id',
): Promise<Map<string, number>> {
  const rewards = new Map<string, number>();
  const sql = `SELECT ${key} AS id, arg_max(value, sequence_id) AS reward FROM ${rewardRows}
    WHERE is_primary AND value IS NOT NULL AND ${key} IS NOT NULL GROUP BY ${key}`;
  for (const row of await allRows(source, sql)) {
    if (typeof row.reward === 'number') rewards.set(String(row.id), row.reward);
  }
  return rewards;
}
