import { allRows, rolloutModeCondition, sqlRegex, type QuerySource } from './source.js';

/**
 * TraceToTriplet: one (prompt, response, reward) triplet per LLM call of a rollout attempt, in
 * call order, computed by one SQL query over the tables derived at ingest (`llm_calls`,
 * `reward_rows`, `agent_spans`), so that DuckDB can write it straight to a file.
 *
 * - Group: a call's attempt (rollout and attempt id); spans without a rollout id group by trace,
 *   so data from any OTLP app becomes triplets too.
 * - Calls repeated with the same response id in a group (a retry, a nested duplicate span)
 *   count once: the first to start.
 * - Span tree: a span whose parent never arrived keeps that missing parent as a virtual node
 *   (its orphaned siblings stay its siblings); roots share the virtual root. With `repairFlat`,
 *   an LLM or reward span emitted flat (no stored parent) is moved under the innermost span of
 *   its trace whose time interval contains it.
 * - Agent: the nearest span, from the call itself up, that names one (agent_spans).
 * - Rewards (the primary ones) are matched like a stack of calls in time order: each reward goes
 *   to the latest call that ended before it (or as it was given) and has none yet; with
 *   `first_sibling`, only among the calls under the reward's parent. A partition with one reward
 *   needs one ASOF join; more rewards take a walk with window functions (clamped running depth).
 * - Credit: `step` (the matched reward, null when none), `final` (the attempt's last reward),
 *   `discounted` (the return sum(gamma^k * reward of the k-th call from this one)).
 */

export type RewardMatch = 'first_occurrence' | 'first_sibling';
export type Credit = 'step' | 'final' | 'discounted';

export interface TripletOptions {
  /** A SQL condition on llm_calls columns and, for rollouts in the store, their input, mode, status, metadata ... */
  readonly where?: string;
  /** Only calls whose span name matches this regular expression. */
  readonly spanMatch?: string;
  /** Only calls made inside an agent whose name matches this regular expression. */
  readonly agentMatch?: string;
  /** Only attempts whose final primary reward is at least this. */
  readonly minReward?: number;
  /** Only rollouts of this mode (train, val, test). */
  readonly rolloutMode?: string;
  /** How rewards find their call (default first_occurrence). */
  readonly rewardMatch?: RewardMatch;
  /** How calls are credited (default step). */
  readonly credit?: Credit;
  /** Discount of `discounted` credit (default 1). */
  readonly gamma?: number;
  /** Move LLM and reward spans that were emitted flat under the innermost span containing them. */
  readonly repairFlat?: boolean;
}

export interface Triplet {
  prompt: { messages: unknown; token_ids: number[] | null };
  response: { message: unknown; token_ids: number[] | null; logprobs: number[] | null };
  reward: number | null;
  metadata: {
    rollout_id: string | null;
    attempt_id: string | null;
    trace_id: string;
    span_id: string;
    sequence_id: number | null;
    agent_name: string | null;
    response_id: string | null;
    model: string | null;
  };
}

/** The rollout columns a `where` may name (the others clash with llm_calls' own). */
const ROLLOUT_COLUMNS = ['input', 'mode', 'status', 'resources_id', 'config', 'metadata'];

function checkTripletOptions(options: TripletOptions): void {
  if (options.rewardMatch !== undefined && !['first_occurrence', 'first_sibling'].includes(options.rewardMatch)) throw new TypeError(`rewardMatch must be first_occurrence or first_sibling, not "${options.rewardMatch}"`);
  if (options.credit !== undefined && !['step', 'final', 'discounted'].includes(options.credit)) throw new TypeError(`credit must be step, final or discounted, not "${options.credit}"`);
  if (options.gamma !== undefined && !(options.gamma >= 0 && options.gamma <= 1)) throw new TypeError(`gamma must be from 0 to 1, not ${options.gamma}`);
  if (options.minReward !== undefined && !Number.isFinite(options.minReward)) throw new TypeError(`minReward must be a finite number, not ${options.minReward}`);
}

/** Group of a call or reward (table alias `t`): its attempt, or its trace when it has no rollout. */
const groupOf = (t: string) => `coalesce(${t}.rollout_id || '/' || coalesce(${t}.attempt_id, ''), 'trace:' || ${t}.trace_id)`;

// Order keys for the reward walk: a call's end, a reward's time, calls before rewards at the same nanosecond.
const callKey = (t: string) => `(epoch_ns(${t}.end_time)::HUGEINT * 4294967296 + coalesce(${t}.sequence_id, 0))`;
const rewardKey = (t: string) => `(epoch_ns(${t}.time)::HUGEINT * 4294967296 + 4294967295)`;

/**
 * The selected calls of every attempt, in call order, each with `agent_name`, `group_id`,
 * `group_key` (GRPO's group: the rollout's task input) and the `reward` its credit gives it;
 * `select` is the output list over `c` (the call's llm_calls row) and `s` (those columns).
 */
export function creditedCallsSql(options: TripletOptions, select: string): string {
  checkTripletOptions(options);
  const withRollouts = options.rolloutMode !== undefined || ROLLOUT_COLUMNS.some((name) => new RegExp(`\\b${name}\\b`, 'i').test(options.where ?? '')) || /\bgroup_key\b/.test(select);
  const conditions = [
    options.where ? `(${options.where})` : '',
    options.spanMatch ? `regexp_matches(c.name, ${sqlRegex(options.spanMatch)})` : '',
    options.rolloutMode !== undefined ? rolloutModeCondition('ro.mode', options.rolloutMode) : '',
  ].filter(Boolean);
  const agentFilter = options.agentMatch ? `WHERE regexp_matches(coalesce(c.agent_name, o.agent_name, ''), ${sqlRegex(options.agentMatch)})` : '';
  const part = options.rewardMatch === 'first_sibling' ? (t: string) => `${t}.group_id || '|' || coalesce(${t}.parent_id, '')` : (t: string) => `${t}.group_id`;
  const gamma = options.gamma ?? 1;
  const reward = {
    step: 'm.value',
    final: 'f.final',
    discounted: `CASE WHEN count(m.value) OVER later > 0 THEN list_reduce(list_reverse(list(coalesce(m.value, 0)) OVER later), lambda acc, x: x + ${gamma} * acc) END`,
  }[options.credit ?? 'step'];
  const placed = (source: string) =>
    options.repairFlat
      ? `SELECT x.* REPLACE (coalesce(CASE WHEN p.span_id IS NOT NULL THEN x.parent_id END, (
           SELECT arg_min(o.span_id, epoch_ns(o.end_time) - epoch_ns(o.start_time)) FROM spans o
           WHERE o.trace_id = x.trace_id AND o.span_id <> x.span_id AND o.start_time <= x.start_time AND o.end_time >= x.end_time
             AND o.span_id NOT IN (SELECT span_id FROM llm_call_rows WHERE trace_id = x.trace_id)), x.parent_id) AS parent_id)
         FROM (${source}) x LEFT JOIN spans p ON p.trace_id = x.trace_id AND p.span_id = x.parent_id`
      : source;
  return `WITH RECURSIVE
selected AS MATERIALIZED (
  ${placed(`SELECT c.trace_id, c.span_id, c.parent_id, c.rollout_id, c.attempt_id, c.sequence_id, c.start_time, c.end_time, c.response_id,
    ${groupOf('c')} AS group_id${withRollouts ? `, coalesce(md5(CAST(ro.input AS VARCHAR)), c.rollout_id, 'trace:' || c.trace_id) AS group_key` : `, coalesce(c.rollout_id, 'trace:' || c.trace_id) AS group_key`}
  FROM llm_calls c${withRollouts ? ` LEFT JOIN (SELECT rollout_id, ${ROLLOUT_COLUMNS.join(', ')} FROM rollouts) ro USING (rollout_id)` : ''}
  ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}`)}
),
-- Calls that share a response id in their group: the first to start stays. Hashes find the
-- candidates cheaply; the exact comparison runs on those alone.
shared_response AS (
  SELECT hash(group_id, response_id) AS h FROM selected WHERE response_id IS NOT NULL GROUP BY h HAVING count(*) > 1
),
repeated AS (
  SELECT span_id, trace_id FROM selected WHERE hash(group_id, response_id) IN (SELECT h FROM shared_response)
  QUALIFY row_number() OVER (PARTITION BY group_id, response_id ORDER BY start_time, span_id) > 1
),
calls AS (
  SELECT c.*, coalesce(own.agent_name, parent.agent_name) AS agent_name
  FROM selected c LEFT JOIN agent_spans own ON own.trace_id = c.trace_id AND own.span_id = c.span_id
    LEFT JOIN agent_spans parent ON parent.trace_id = c.trace_id AND parent.span_id = c.parent_id
  WHERE NOT EXISTS (SELECT 1 FROM repeated r WHERE r.trace_id = c.trace_id AND r.span_id = c.span_id)
),
-- Agents further up than the parent: walk the stored span tree (only for calls that need it).
ancestors(trace_id, span_id, ancestor_id, depth) AS (
  SELECT trace_id, span_id, parent_id, 1 FROM calls WHERE agent_name IS NULL AND parent_id IS NOT NULL
  UNION ALL
  SELECT x.trace_id, x.span_id, s.parent_id, x.depth + 1
  FROM ancestors x JOIN spans s ON s.trace_id = x.trace_id AND s.span_id = x.ancestor_id
  WHERE s.parent_id IS NOT NULL AND x.depth < 64
    AND NOT EXISTS (SELECT 1 FROM agent_spans a WHERE a.trace_id = x.trace_id AND a.span_id = x.ancestor_id)
),
outer_agents AS (
  SELECT x.trace_id, x.span_id, arg_min(a.agent_name, x.depth) AS agent_name
  FROM ancestors x JOIN agent_spans a ON a.trace_id = x.trace_id AND a.span_id = x.ancestor_id GROUP BY ALL
),
named AS (
  SELECT c.* REPLACE (coalesce(c.agent_name, o.agent_name) AS agent_name)
  FROM calls c LEFT JOIN outer_agents o USING (trace_id, span_id) ${agentFilter}
),
rewards AS (
  ${placed(`SELECT r.trace_id, r.span_id, r.parent_id, r.sequence_id, r.time, r.value, r.time AS start_time, r.time AS end_time, ${groupOf('r')} AS group_id
  FROM reward_rows r WHERE r.is_primary AND ${groupOf('r')} IN (SELECT group_id FROM named)`)}
),
finals AS (
  SELECT group_id, arg_max(value, (time, sequence_id, span_id)) AS final FROM rewards GROUP BY group_id
),
call_events AS (
  SELECT ${part('c')} AS part, c.span_id, ${callKey('c')} AS key FROM named c WHERE c.end_time IS NOT NULL
),
reward_events AS (
  SELECT ${part('r')} AS part, r.span_id, ${rewardKey('r')} AS key, r.value, count(*) OVER (PARTITION BY ${part('r')}) AS n FROM rewards r
),
walk AS (
  SELECT *, sum(step) OVER (PARTITION BY part ORDER BY key, step DESC, span_id ROWS UNBOUNDED PRECEDING) AS depth,
    row_number() OVER (PARTITION BY part ORDER BY key, step DESC, span_id) AS pos
  FROM (
    SELECT part, span_id, key, 1 AS step, NULL::DOUBLE AS value FROM call_events WHERE part IN (SELECT part FROM reward_events WHERE n > 1)
    UNION ALL SELECT part, span_id, key, -1, value FROM reward_events WHERE n > 1
  )
),
levels AS (
  SELECT *, depth - least(0, min(depth) OVER (PARTITION BY part ORDER BY pos ROWS UNBOUNDED PRECEDING)) AS level,
    depth >= least(0, coalesce(min(depth) OVER (PARTITION BY part ORDER BY pos ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS taken
  FROM walk
),
matched AS (
  SELECT c.part, c.span_id, r.value FROM (SELECT * FROM reward_events WHERE n = 1) r ASOF JOIN call_events c ON c.part = r.part AND r.key >= c.key
  UNION ALL
  SELECT c.part, c.span_id, r.value FROM (SELECT * FROM levels WHERE step = -1 AND taken) r
    ASOF JOIN (SELECT * FROM levels WHERE step = 1) c ON c.part = r.part AND c.level = r.level + 1 AND r.pos >= c.pos
)
SELECT ${select}
FROM (
  SELECT s.*, ${reward} AS reward
  FROM named s LEFT JOIN matched m ON m.part = ${part('s')} AND m.span_id = s.span_id LEFT JOIN finals f USING (group_id)
  ${options.minReward !== undefined ? `WHERE f.final >= ${options.minReward}` : ''}
  WINDOW later AS (PARTITION BY s.group_id ORDER BY s.sequence_id NULLS LAST, s.start_time, s.span_id ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
) s JOIN llm_calls c USING (trace_id, span_id)
ORDER BY s.group_id, s.sequence_id NULLS LAST, s.start_time, s.span_id`;
}

/** The triplet columns: prompt, response, reward, metadata (structs, so Parquet keeps their types). */
const TRIPLET_SELECT = `{'messages': c.input_messages, 'token_ids': c.prompt_token_ids} AS prompt,
  {'message': c.output_messages->0, 'token_ids': c.response_token_ids, 'logprobs': c.response_logprobs} AS response,
  s.reward,
  {'rollout_id': s.rollout_id, 'attempt_id': s.attempt_id, 'trace_id': s.trace_id, 'span_id': s.span_id, 'sequence_id': s.sequence_id,
   'agent_name': s.agent_name, 'response_id': s.response_id, 'model': c.model} AS metadata`;

export function tripletsSql(options: TripletOptions = {}): string {
  return creditedCallsSql(options, TRIPLET_SELECT);
}

/** The triplets of every attempt that `options` select, batch by batch, in order. */
export async function* streamTriplets(source: QuerySource, options: TripletOptions = {}): AsyncGenerator<Triplet[]> {
  for await (const batch of source.stream(tripletsSql(options))) yield batch as unknown as Triplet[];
}

/** The triplets of every attempt that `options` select, attempt by attempt. */
export async function traceToTriplets(source: QuerySource, options: TripletOptions = {}): Promise<Triplet[]> {
  return (await allRows(source, tripletsSql(options))) as unknown as Triplet[];
}
