/**
 * Every request the dashboard makes for its data, as REST paths and SQL text: the pages send
 * them, and the dashboard benchmark (bench/dashboard.ts) times the very same ones. The SQL is
 * built from the store's own builders (the reading of reward spans, the LLM calls' view, the
 * credit matching of TraceToTriplet), so the dashboard shows what the exports give.
 * No DOM here: this module also runs in Node.
 */
import type { RolloutMode, RolloutStatus } from '../../src/api/types.js';
import { creditedCallsSql } from '../../src/sql/credited-calls.js';
import { derivedRowsOf, type SpanKeys } from '../../src/sql/derived.js';
import { finalRewardsSql } from '../../src/sql/final-rewards.js';
import { sqlText } from '../../src/sql/literals.js';
import { llmCallsOf } from '../../src/sql/views.js';

/** Rollout fields the store sorts by (GET /v1/agl/rollouts sort_by). */
export const ROLLOUT_SORTS = ['start_time', 'end_time', 'status', 'mode', 'resources_id', 'rollout_id'] as const;
export type RolloutSort = (typeof ROLLOUT_SORTS)[number];

export interface RolloutFilters {
  readonly status?: RolloutStatus;
  readonly mode?: RolloutMode;
  /** Text the rollout's input (as JSON) contains. */
  readonly text?: string;
  readonly sort: RolloutSort;
  readonly order: 'asc' | 'desc';
  readonly offset: number;
  readonly limit: number;
}

/** The rollouts page's list: filtered, sorted and paged by the store, in its memory. */
export function rolloutsPath(filters: RolloutFilters): string {
  const query = new URLSearchParams({
    limit: String(filters.limit),
    offset: String(filters.offset),
    sort_by: filters.sort,
    sort_order: filters.order,
  });
  if (filters.status) query.set('status_in', filters.status);
  if (filters.mode) query.set('mode_in', filters.mode);
  if (filters.text) query.set('input_contains', filters.text);
  return `/v1/agl/rollouts?${query}`;
}

/** The final reward of each of these rollouts, by the rule every algorithm reads them with. */
export const rolloutRewardsSql = (rolloutIds: readonly string[]): string => finalRewardsSql('rollout', rolloutIds);

const attemptKeys = (rolloutId: string, attemptId: string): SpanKeys => ({
  rolloutIds: [rolloutId],
  attemptIds: [attemptId],
});

/**
 * One attempt's LLM calls, as `llm_calls` gives them, each with the reward TraceToTriplet credits
 * it (default options: each reward goes to the latest call that ended before it) and that
 * reward's span. Token ids are counted here and read on demand (`tokenIdsSql`).
 */
export function attemptCallsSql(rolloutId: string, attemptId: string): string {
  const rows = derivedRowsOf(attemptKeys(rolloutId, attemptId));
  // Each relation is written once and named: inlined, the text grew to 100 KB, and DuckDB took
  // a second to plan it.
  const credited = creditedCallsSql({}, 's.trace_id, s.span_id, s.reward, s.reward_span_id', {
    calls: 'attempt_calls',
    rewards: 'attempt_rewards',
    agents: 'attempt_agents',
    withCall: false,
  });
  return `WITH attempt_call_rows AS MATERIALIZED (${rows.calls}),
attempt_rewards AS MATERIALIZED (${rows.rewards}),
attempt_agents AS MATERIALIZED (${rows.agents}),
attempt_calls AS MATERIALIZED (${llmCallsOf('attempt_call_rows')}),
credited AS (${credited})
SELECT c.span_id, c.trace_id, c.parent_id, c.sequence_id, epoch_ns(c.start_time) / 1e9 AS start_time,
  epoch_ns(c.end_time) / 1e9 AS end_time, c.name, c.provider, c.model, c.input_messages, c.output_messages, c.tools,
  c.input_tokens, c.output_tokens, c.finish_reason, c.response_id,
  len(c.prompt_token_ids) AS prompt_token_count, len(c.response_token_ids) AS response_token_count,
  k.reward, k.reward_span_id
FROM attempt_calls c LEFT JOIN credited k USING (trace_id, span_id)
ORDER BY c.sequence_id NULLS LAST, c.start_time, c.span_id`;
}

/** One attempt's rewards (every reward of every reward span), in time order, with who gave each and its text. */
export function attemptRewardsSql(rolloutId: string, attemptId: string): string {
  return `SELECT span_id, name, value, is_primary, epoch_ns(time) / 1e9 AS time, source, feedback
FROM (${derivedRowsOf(attemptKeys(rolloutId, attemptId)).rewards}) ORDER BY time, sequence_id, name`;
}

/** A call's token ids, read when asked for (they can be thousands of numbers). */
export function tokenIdsSql(traceId: string, spanId: string): string {
  return `SELECT prompt_token_ids, response_token_ids FROM llm_calls WHERE trace_id = ${sqlText(traceId)} AND span_id = ${sqlText(spanId)}`;
}

/** Each rollout's final reward by the `rewards` view (the training page reads all rollouts). */
const FINALS = `finals AS (
  SELECT rollout_id, arg_max(value, sequence_id) AS reward FROM rewards WHERE is_primary AND value IS NOT NULL GROUP BY rollout_id
)`;

/**
 * Mean final reward over time, per mode: the rollouts in order of their end, in up to 60 bins of
 * equal count (about 10 rollouts each, so a burst and a lull weigh the same), each at its
 * rollouts' mean end time.
 */
export const REWARD_OVER_TIME_SQL = `WITH ${FINALS},
scored AS (SELECT coalesce(r.end_time, r.start_time) AS t, r.mode, f.reward FROM finals f JOIN rollouts r USING (rollout_id) WHERE r.mode IS NOT NULL),
binned AS (
  SELECT *, (row_number() OVER (ORDER BY t) - 1) * least(60, greatest(1, count(*) OVER () // 10)) // count(*) OVER () AS bin FROM scored
)
SELECT mode, avg(t) AS time, avg(reward) AS reward, count(*)::INTEGER AS rollouts FROM binned GROUP BY mode, bin ORDER BY time, mode`;

/** Mean final reward per resources version, in the order the versions were first used. */
export const REWARD_BY_VERSION_SQL = `WITH ${FINALS}
SELECT r.resources_id, min(r.start_time) AS first_used, count(*)::INTEGER AS rollouts,
  count(*) FILTER (WHERE r.mode = 'train')::INTEGER AS train, count(*) FILTER (WHERE r.mode = 'val')::INTEGER AS val,
  avg(f.reward) AS mean_reward, avg(f.reward) FILTER (WHERE r.mode = 'val') AS val_reward
FROM finals f JOIN rollouts r USING (rollout_id) WHERE r.resources_id IS NOT NULL
GROUP BY r.resources_id ORDER BY first_used`;

export const PROMPT_VERSIONS_SQL = `SELECT run_id, session, version, parent, round, status, reason, template, critique, gradient_score,
  batch_score, val_score, rollouts, failed_rollouts, in_beam, is_best, resources_id, epoch_ns(created) / 1e9 AS created
FROM prompt_versions ORDER BY run_id, created`;

export const SFT_ITERATIONS_SQL = `SELECT run_id, iteration, status, rollouts, succeeded, mean_reward, val_mean_reward, kept_rollouts,
  records, model, error FROM sft_iterations ORDER BY run_id, iteration`;

/** The columns of a view when it exists (none when it does not): for views other work adds, such as GRPO's. */
export function viewColumnsSql(view: string): string {
  return `SELECT column_name AS name, data_type AS type FROM duckdb_columns()
WHERE table_name = ${sqlText(view)} AND schema_name = 'main' ORDER BY column_index`;
}

/** GRPO's training steps, in step order (the view is read only when it exists). */
export const trainingStepsSql = (stepColumn: string) =>
  `SELECT * FROM training_steps ORDER BY "${stepColumn.replaceAll('"', '""')}" LIMIT 10000`;

/** The SQL page's saved examples. */
export const EXAMPLE_QUERIES: readonly { readonly title: string; readonly sql: string }[] = [
  {
    title: 'Tokens per model',
    sql: `SELECT model, count(*) AS calls, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens
FROM llm_calls GROUP BY model ORDER BY calls DESC`,
  },
  {
    title: 'Slowest tools',
    sql: `SELECT coalesce(attributes->>'gen_ai.tool.name', attributes->>'tool.name', name) AS tool, count(*) AS calls,
  round(avg(epoch_ns(end_time) - epoch_ns(start_time)) / 1e6, 1) AS mean_ms,
  round(max(epoch_ns(end_time) - epoch_ns(start_time)) / 1e6, 1) AS max_ms
FROM spans
WHERE (attributes->>'gen_ai.operation.name') = 'execute_tool' OR (attributes->>'openinference.span.kind') = 'TOOL'
  OR name ILIKE '%tool%'
GROUP BY tool ORDER BY mean_ms DESC LIMIT 20`,
  },
  {
    title: 'Reward by resources version',
    sql: `SELECT r.resources_id, count(*) AS rollouts, round(avg(f.reward), 3) AS mean_reward
FROM rollouts r JOIN (
  SELECT rollout_id, arg_max(value, sequence_id) AS reward FROM rewards WHERE is_primary GROUP BY rollout_id
) f USING (rollout_id)
GROUP BY r.resources_id ORDER BY min(r.start_time)`,
  },
  {
    title: 'Rollouts by status and mode',
    sql: `SELECT status, mode, count(*) AS rollouts FROM rollouts GROUP BY ALL ORDER BY rollouts DESC`,
  },
  {
    title: 'Prompt versions',
    sql: `SELECT version, parent, round, status, batch_score, val_score, is_best, template FROM prompt_versions ORDER BY created`,
  },
];

/** Each evaluation run's variants (the `evaluations` view), newest run first. */
export const EVALUATIONS_SQL = `SELECT run_id, variant, position, resources_id, tasks, samples, rollouts, failed, mean, mean_low, mean_high,
  success_rate, baseline, difference, difference_low, difference_high, p_value, tasks_needed, epoch_ns(created) / 1e9 AS created
FROM evaluations ORDER BY max(created) OVER (PARTITION BY run_id) DESC, run_id, position LIMIT 1000`;

/** One run's tasks per variant against the baseline, the largest change first. */
export const evaluationTasksSql = (runId: string) =>
  `SELECT variant, task, input::VARCHAR AS input, mean, baseline_mean, change, failed, rollout_ids::VARCHAR AS rollout_ids
FROM evaluation_tasks WHERE run_id = ${sqlText(runId)} ORDER BY abs(change) DESC NULLS LAST, task, variant`;
