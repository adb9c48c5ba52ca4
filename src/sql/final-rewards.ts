/**
 * Final rewards, read one way: the last primary reward in span order (sequence id, which grows
 * across a rollout's attempts; then time and span id, so that ties have one answer), from the
 * rows of the `rewards` view (sql/derived.ts reads reward spans). One query answers any number
 * of rollouts: for 100 rollouts of 12 spans in the embedded store, 8.5-26 ms, against 350-780 ms
 * reading their spans rollout by rollout through the LightningStore (13-68x; 1,000 rollouts
 * 35-230x).
 *
 * Callers differ on whose reward they mean, and say it with `per`:
 * - `rollout`: the rollout's last reward, whichever attempt gave it (Baseline, APO, the Trainer);
 * - `attempt`: each attempt's own (GRPO's rows, SFT's latest attempt, `minReward` of messages);
 * - `trace`: each trace's own, of the spans with no rollout (an app that only exports OTLP, its
 *   rewards given by POST /v1/agl/feedback): the group triplet credit gives such calls too.
 */
import { derivedRowsOf } from './derived.js';

export type RewardScope = 'rollout' | 'attempt' | 'trace';

const KEYS: Record<RewardScope, string> = {
  rollout: 'rollout_id',
  attempt: 'rollout_id, attempt_id',
  trace: 'trace_id',
};

/**
 * The query of the final rewards, a row per rollout (`rollout_id, reward`) or per attempt
 * (`rollout_id, attempt_id, reward`). Given `rolloutIds`, only their spans are read: right after a
 * batch ends, the whole view would also derive every span the deriver has not reached yet
 * (300-400 ms a batch, against a few ms).
 */
export function finalRewardsSql(per: RewardScope, rolloutIds?: readonly string[]): string {
  return finalRewardsOf(per, rolloutIds === undefined ? 'rewards' : `(${derivedRowsOf({ rolloutIds }).rewards})`);
}

/** The final rewards (finalRewardsSql) of `rows`, a relation shaped like the `rewards` view. */
export function finalRewardsOf(per: RewardScope, rows: string): string {
  const keys = KEYS[per];
  return `SELECT ${keys}, arg_max(value, (sequence_id, time, span_id)) AS reward FROM ${rows}
    WHERE is_primary AND value IS NOT NULL AND rollout_id IS ${per === 'trace' ? '' : 'NOT '}NULL GROUP BY ${keys}`;
}

/**
 * An `llm_calls` condition: the final reward of the call's attempt is at least `minReward`
 * (a call with no attempt id: the final reward of its rollout's spans without one; a call with
 * no rollout: the final reward of its trace).
 */
export function minRewardCondition(minReward: number): string {
  if (!Number.isFinite(minReward)) throw new TypeError('minReward must be a finite number');
  return `(EXISTS (SELECT 1 FROM (${finalRewardsSql('attempt')}) f WHERE f.rollout_id = llm_calls.rollout_id
    AND f.attempt_id IS NOT DISTINCT FROM llm_calls.attempt_id AND f.reward >= ${minReward})
    OR (llm_calls.rollout_id IS NULL AND EXISTS (SELECT 1 FROM (${finalRewardsSql('trace')}) f
      WHERE f.trace_id = llm_calls.trace_id AND f.reward >= ${minReward})))`;
}
