/**
 * The LLM calls of each attempt, in call order, with the agent each was made in and the reward
 * its credit gives it: the core of TraceToTriplet (adapters/triplets.ts) and TraceToTrajectory,
 * in one SQL query over `llm_calls`, `reward_rows`, `agent_spans` and `spans`. The store's
 * deriver keeps its default answer per call (src/store/deriver.ts), so that an export with the
 * default options is a plain scan; the adapters and the dashboard run it with their options.
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
 *   needs one join; more rewards take a walk with window functions (clamped running depth).
 * - Credit: `step` (the matched reward, null when none), `final` (the attempt's last reward),
 *   `discounted` (the return sum(gamma^k * reward of the k-th call from this one)); whatever the
 *   credit, `reward_span_id` is the reward span matched to the call (the dashboard marks it).
 */
import { rolloutModeCondition, sqlRegex, sqlText } from './literals.js';

export type RewardMatch = 'first_occurrence' | 'first_sibling';
export type Credit = 'step' | 'final' | 'discounted';

export interface CallSelection {
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
  /** Only the calls of these attempts (an algorithm's batch: each rollout's latest attempt). */
  readonly attempts?: readonly { readonly rolloutId: string; readonly attemptId: string }[];
  /** How rewards find their call (default first_occurrence). */
  readonly rewardMatch?: RewardMatch;
  /** How calls are credited (default step). */
  readonly credit?: Credit;
  /** Discount of `discounted` credit (default 1). */
  readonly gamma?: number;
  /** Move LLM and reward spans that were emitted flat under the innermost span containing them. */
  readonly repairFlat?: boolean;
}

/** The rollout columns a `where` may name (the others clash with llm_calls' own). */
const ROLLOUT_COLUMNS = ['input', 'mode', 'status', 'resources_id', 'config', 'metadata'];

export function checkCallSelection(options: CallSelection): void {
  if (options.rewardMatch !== undefined && !['first_occurrence', 'first_sibling'].includes(options.rewardMatch))
    throw new TypeError(`rewardMatch must be first_occurrence or first_sibling, not "${options.rewardMatch}"`);
  if (options.credit !== undefined && !['step', 'final', 'discounted'].includes(options.credit))
    throw new TypeError(`credit must be step, final or discounted, not "${options.credit}"`);
  if (options.gamma !== undefined && !(options.gamma >= 0 && options.gamma <= 1))
    throw new TypeError(`gamma must be from 0 to 1, not ${options.gamma}`);
  if (options.minReward !== undefined && !Number.isFinite(options.minReward))
    throw new TypeError(`minReward must be a finite number, not ${options.minReward}`);
}

/** Group of a call or reward (table alias `t`): its attempt, or its trace when it has no rollout. */
export const groupOf = (t: string) =>
  `coalesce(${t}.rollout_id || '/' || coalesce(${t}.attempt_id, ''), 'trace:' || ${t}.trace_id)`;

// Order keys for the reward walk: a call's end, a reward's time, calls before rewards at the same nanosecond.
const callKey = (t: string) => `(epoch_ns(${t}.end_time)::HUGEINT * 4294967296 + coalesce(${t}.sequence_id, 0))`;
const rewardKey = (t: string) => `(epoch_ns(${t}.time)::HUGEINT * 4294967296 + 4294967295)`;

/** The relations the credited calls are read from: by default the views over every stored span. */
interface CreditSources {
  /** Rows as `llm_calls` gives them. */
  readonly calls?: string;
  /** Rows as `reward_rows` gives them. */
  readonly rewards?: string;
  /** Rows as `agent_spans` gives them. */
  readonly agents?: string;
  /** Whether the output may name `c`, the call's row of `calls` (default true). */
  readonly withCall?: boolean;
}

/**
 * The selected calls of every attempt, in call order, each with `agent_name`, `group_id`,
 * `group_key` (GRPO's group: the rollout's task input), the `reward` its credit gives it and
 * `reward_span_id`, the reward matched to it;
 * `select` is the output list over `s` (those columns) and `c` (the call's llm_calls row).
 */
export function creditedCallsSql(options: CallSelection, select: string, sources: CreditSources = {}): string {
  const { calls = 'llm_calls', rewards = 'reward_rows', agents = 'agent_spans', withCall = true } = sources;
  checkCallSelection(options);
  const ctes = [
    selectedSql(options, select, calls),
    callAgentsSql(agents),
    distinctCallsSql('call_agents'),
    namedCallsSql(options, 'call_agents'),
    matchedRewardsSql(options, rewards),
  ];
  return `WITH RECURSIVE\n${ctes.join(',\n')}\n${creditedSql(options, select, calls, withCall)}`;
}

/**
 * With `repairFlat`, `source` (rows with trace_id, span_id, parent_id and times) with each row
 * whose parent is not stored moved under the innermost span of its trace that contains it.
 */
function placed(source: string, repairFlat: boolean | undefined): string {
  return repairFlat
    ? `SELECT x.* REPLACE (coalesce(CASE WHEN p.span_id IS NOT NULL THEN x.parent_id END, (
           SELECT arg_min(o.span_id, epoch_ns(o.end_time) - epoch_ns(o.start_time)) FROM spans o
           WHERE o.trace_id = x.trace_id AND o.span_id <> x.span_id AND o.start_time <= x.start_time AND o.end_time >= x.end_time
             AND o.span_id NOT IN (SELECT span_id FROM llm_call_rows WHERE trace_id = x.trace_id)), x.parent_id) AS parent_id)
         FROM (${source}) x LEFT JOIN spans p ON p.trace_id = x.trace_id AND p.span_id = x.parent_id`
    : source;
}

/** The partition a reward is matched in (table alias `t`): its group, or with first_sibling its parent in the group. */
const partOf = (options: CallSelection) =>
  options.rewardMatch === 'first_sibling'
    ? (t: string) => `${t}.group_id || '|' || coalesce(${t}.parent_id, '')`
    : (t: string) => `${t}.group_id`;

/** CTE `selected`: the calls the options select, each with its group and group key. */
function selectedSql(options: CallSelection, select: string, calls: string): string {
  const withRollouts =
    options.rolloutMode !== undefined ||
    ROLLOUT_COLUMNS.some((name) => new RegExp(`\\b${name}\\b`, 'i').test(options.where ?? '')) ||
    /\bgroup_key\b/.test(select);
  const conditions = [
    options.where ? `(${options.where})` : '',
    options.spanMatch ? `regexp_matches(c.name, ${sqlRegex(options.spanMatch)})` : '',
    options.rolloutMode !== undefined ? rolloutModeCondition('ro.mode', options.rolloutMode) : '',
    options.attempts ? attemptsCondition(options.attempts) : '',
  ].filter(Boolean);
  return `selected AS MATERIALIZED (
  ${placed(
    `SELECT c.trace_id, c.span_id, c.parent_id, c.rollout_id, c.attempt_id, c.sequence_id, c.start_time, c.end_time, c.response_id,
    ${groupOf('c')} AS group_id${withRollouts ? `, coalesce(md5(CAST(ro.input AS VARCHAR)), c.rollout_id, 'trace:' || c.trace_id) AS group_key` : `, coalesce(c.rollout_id, 'trace:' || c.trace_id) AS group_key`}
  FROM ${calls} c${withRollouts ? ` LEFT JOIN (SELECT rollout_id, ${ROLLOUT_COLUMNS.join(', ')} FROM rollouts) ro USING (rollout_id)` : ''}
  ${conditions.length ? `WHERE ${conditions.join(' AND ')}` : ''}`,
    options.repairFlat,
  )}
)`;
}

const idList = (ids: string[]) => [...new Set(ids)].map(sqlText).join(', ');

/** The condition on `c` of calls of `attempts`: by rollout id too, which DuckDB can push down to the scan. */
function attemptsCondition(attempts: NonNullable<CallSelection['attempts']>): string {
  if (attempts.length === 0) return 'false';
  return `${rolloutsCondition(attempts)} AND c.attempt_id IN (${idList(attempts.map((a) => a.attemptId))})`;
}

/** The condition on `c` of calls of the rollouts of `attempts`, any attempt of theirs. */
function rolloutsCondition(attempts: NonNullable<CallSelection['attempts']>): string {
  return attempts.length === 0 ? 'false' : `c.rollout_id IN (${idList(attempts.map((a) => a.rolloutId))})`;
}

/**
 * CTE `call_agents`: the agents of the selected calls' traces, read once. The walk up the span
 * tree reads them at every step and the calls twice more: over spans not derived yet, each read
 * was a scan of every such span's attributes (a GRPO batch's: 120 MB of token ids).
 */
const callAgentsSql = (agents: string) => `call_agents AS MATERIALIZED (
  SELECT trace_id, span_id, agent_name FROM ${agents} WHERE trace_id IN (SELECT trace_id FROM selected)
)`;

/** CTEs `shared_response`, `repeated` and `calls`: the selected calls without repeats, each with the agent of its own span or its parent. */
function distinctCallsSql(agents: string): string {
  return `-- Calls that share a response id in their group: the first to start stays. Hashes find the
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
  FROM selected c LEFT JOIN ${agents} own ON own.trace_id = c.trace_id AND own.span_id = c.span_id
    LEFT JOIN ${agents} parent ON parent.trace_id = c.trace_id AND parent.span_id = c.parent_id
  WHERE NOT EXISTS (SELECT 1 FROM repeated r WHERE r.trace_id = c.trace_id AND r.span_id = c.span_id)
)`;
}

/** CTEs from `walked` to `named`: each call with the agent of the nearest span up its tree that names one, filtered by agentMatch. */
function namedCallsSql(options: CallSelection, agents: string): string {
  const agentFilter = options.agentMatch
    ? `WHERE regexp_matches(coalesce(c.agent_name, o.agent_name, ''), ${sqlRegex(options.agentMatch)})`
    : '';
  return `-- Agents further up than the parent: walk the stored span tree (only for calls that need it,
-- through the spans of their traces alone).
walked AS (SELECT * FROM calls WHERE agent_name IS NULL AND parent_id IS NOT NULL),
walked_spans AS MATERIALIZED (SELECT trace_id, span_id, parent_id FROM spans WHERE trace_id IN (SELECT trace_id FROM walked)),
ancestors(trace_id, span_id, ancestor_id, depth) AS (
  SELECT trace_id, span_id, parent_id, 1 FROM walked
  UNION ALL
  SELECT x.trace_id, x.span_id, s.parent_id, x.depth + 1
  FROM ancestors x JOIN walked_spans s ON s.trace_id = x.trace_id AND s.span_id = x.ancestor_id
  WHERE s.parent_id IS NOT NULL AND x.depth < 64
    AND NOT EXISTS (SELECT 1 FROM ${agents} a WHERE a.trace_id = x.trace_id AND a.span_id = x.ancestor_id)
),
outer_agents AS (
  SELECT x.trace_id, x.span_id, arg_min(a.agent_name, x.depth) AS agent_name
  FROM ancestors x JOIN ${agents} a ON a.trace_id = x.trace_id AND a.span_id = x.ancestor_id GROUP BY ALL
),
named AS (
  SELECT c.* REPLACE (coalesce(c.agent_name, o.agent_name) AS agent_name)
  FROM calls c LEFT JOIN outer_agents o USING (trace_id, span_id) ${agentFilter}
)`;
}

/** CTEs from `rewards` to `matched`: each attempt's final reward, and each primary reward with the call it goes to. */
function matchedRewardsSql(options: CallSelection, rewards: string): string {
  const part = partOf(options);
  return `rewards AS (
  ${placed(
    `SELECT r.trace_id, r.span_id, r.parent_id, r.sequence_id, r.time, r.value, r.time AS start_time, r.time AS end_time, ${groupOf('r')} AS group_id
  FROM ${rewards} r WHERE r.is_primary AND ${groupOf('r')} IN (SELECT group_id FROM named)`,
    options.repairFlat,
  )}
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
-- Each reward's call: the latest before it (of its level). An ASOF join says the same, but
-- costs far more for partitions of a few calls each.
matched AS (
  SELECT r.part, arg_max(c.span_id, c.key) AS span_id, any_value(r.value) AS value, any_value(r.span_id) AS reward_span_id
  FROM (SELECT * FROM reward_events WHERE n = 1) r JOIN call_events c ON c.part = r.part AND c.key <= r.key GROUP BY r.part
  UNION ALL
  SELECT r.part, arg_max(c.span_id, c.pos), any_value(r.value), any_value(r.span_id)
  FROM (SELECT * FROM levels WHERE step = -1 AND taken) r JOIN (SELECT * FROM levels WHERE step = 1) c ON c.part = r.part AND c.level = r.level + 1 AND c.pos <= r.pos
  GROUP BY r.part, r.pos
)`;
}

/** The order of calls (over `s`): each attempt's together, in call order. */
export const CALL_ORDER = 's.group_id, s.sequence_id NULLS LAST, s.start_time, s.span_id';

/** The final select: each named call with the reward its credit gives it, in call order. */
function creditedSql(options: CallSelection, select: string, calls: string, withCall: boolean): string {
  const part = partOf(options);
  const gamma = options.gamma ?? 1;
  const reward = {
    step: 'm.value',
    final: 'f.final',
    discounted: `CASE WHEN count(m.value) OVER later > 0 THEN list_reduce(list_reverse(list(coalesce(m.value, 0)) OVER later), lambda acc, x: x + ${gamma} * acc) END`,
  }[options.credit ?? 'step'];
  return `SELECT ${select}
FROM (
  SELECT s.*, ${reward} AS reward, m.reward_span_id
  FROM named s LEFT JOIN matched m ON m.part = ${part('s')} AND m.span_id = s.span_id LEFT JOIN finals f USING (group_id)
  ${options.minReward !== undefined ? `WHERE f.final >= ${options.minReward}` : ''}
  WINDOW later AS (PARTITION BY s.group_id ORDER BY s.sequence_id NULLS LAST, s.start_time, s.span_id ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
) s${withCall ? ` JOIN ${calls} c USING (trace_id, span_id)` : ''}
ORDER BY ${CALL_ORDER}`;
}
