import type { QuerySource } from './messages.js';
import { jsonValue as json } from './json-column.js';

/**
 * TraceToTriplet: one (prompt, response, reward) triplet per LLM call of a rollout attempt, in
 * call order. SQL does the selection: the calls of `llm_calls` (a retry or a nested duplicate
 * with the same response id counts once), the agent each call ran in (the nearest enclosing
 * span that names one), and the rewards of the same attempts. Matching rewards to calls is
 * sequential (each reward takes a call that no earlier reward took), so it runs here, one
 * attempt at a time over rows in order.
 *
 * Spans without a rollout id are grouped by trace: data from any OTLP app becomes triplets too.
 */

export type RewardMatch = 'first_occurrence' | 'first_sibling';
export type Credit = 'step' | 'final' | 'discounted';

export interface TripletOptions {
  /** A SQL condition on llm_calls columns (rollout_id, attempt_id, trace_id, model ...). */
  readonly where?: string;
  /** Only calls whose span name matches this regular expression. */
  readonly spanMatch?: string;
  /** Only calls made inside an agent whose name matches this regular expression. */
  readonly agentMatch?: string;
  /** How rewards find their call (default first_occurrence). */
  readonly rewardMatch?: RewardMatch;
  /**
   * How calls are credited (default step): `step`, the reward matched to the call (null when
   * none); `final`, every call the attempt's last reward; `discounted`, the return
   * sum(gamma^k * reward of the k-th call after it).
   */
  readonly credit?: Credit;
  readonly gamma?: number;
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

/** The names an enclosing span gives its agent, in order of preference. */
const AGENT_NAME = `coalesce(a.attributes->>'agent.name', a.attributes->>'gen_ai.agent.name',
  CASE WHEN (a.attributes->>'openinference.span.kind') = 'AGENT' THEN a.name END,
  a.attributes->>'agentlightning.operation.name',
  CASE WHEN (a.attributes->>'langchain.run_type') = 'chain' THEN a.name END)`;

/** Group of a call or reward (table alias `t`): its attempt, or its trace when it has no rollout. */
const groupOf = (t: string) => `coalesce(${t}.rollout_id || '/' || coalesce(${t}.attempt_id, ''), 'trace:' || ${t}.trace_id)`;

export function callsSql(options: TripletOptions): string {
  const where = options.where ? `WHERE (${options.where})` : '';
  const spanMatch = options.spanMatch ? `WHERE regexp_matches(s.name, ${sqlRegex(options.spanMatch)})` : '';
  const agentFilter = options.agentMatch ? `WHERE regexp_matches(coalesce(agent_name, ''), ${sqlRegex(options.agentMatch)})` : '';
  return `WITH RECURSIVE
calls AS (
  SELECT c.*, s.parent_id, ${groupOf('c')} AS group_id
  FROM (SELECT * FROM llm_calls ${where}) c JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
  ${spanMatch}
),
ancestors(span_id, trace_id, ancestor_id, depth) AS (
  SELECT span_id, trace_id, parent_id, 1 FROM calls
  UNION ALL
  SELECT x.span_id, x.trace_id, s.parent_id, x.depth + 1
  FROM ancestors x JOIN spans s ON s.trace_id = x.trace_id AND s.span_id = x.ancestor_id
  WHERE x.ancestor_id IS NOT NULL AND x.depth < 64
),
agents AS (
  SELECT x.span_id, x.trace_id, arg_min(${AGENT_NAME}, x.depth) FILTER (WHERE ${AGENT_NAME} IS NOT NULL) AS agent_name
  FROM ancestors x JOIN spans a ON a.trace_id = x.trace_id AND a.span_id = x.ancestor_id
  GROUP BY x.span_id, x.trace_id
),
named AS (
  SELECT c.*, g.agent_name,
    -- GRPO's group: rollouts of the same task (the same input) are compared with each other.
    coalesce(md5(CAST(ro.input AS VARCHAR)), c.rollout_id, 'trace:' || c.trace_id) AS group_key
  FROM calls c LEFT JOIN agents g USING (trace_id, span_id) LEFT JOIN rollouts ro ON ro.rollout_id = c.rollout_id
)
SELECT group_id, group_key, rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, epoch_ns(end_time) AS end_ns, agent_name,
  response_id, model, input_messages, output_messages, prompt_token_ids, response_token_ids, response_logprobs
FROM named ${agentFilter}
QUALIFY response_id IS NULL OR row_number() OVER (PARTITION BY group_id, response_id ORDER BY start_time, span_id) = 1
ORDER BY group_id, sequence_id NULLS LAST, start_time, span_id`;
}

export function rewardsSql(options: TripletOptions): string {
  const where = options.where ? `WHERE (${options.where})` : '';
  return `SELECT ${groupOf('r')} AS group_id, s.parent_id, epoch_ns(r.time) AS time_ns, r.value
FROM rewards r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.is_primary AND ${groupOf('r')} IN (SELECT ${groupOf('llm_calls')} FROM llm_calls ${where})
ORDER BY group_id, r.time, r.sequence_id, r.span_id`;
}

function sqlRegex(pattern: string): string {
  try {
    new RegExp(pattern);
  } catch (error) {
    throw new TypeError(`not a regular expression: ${pattern} (${(error as Error).message})`);
  }
  return `'${pattern.replaceAll("'", "''")}'`;
}

const ids = (value: unknown) => (Array.isArray(value) ? value.map(Number) : null);

interface CallRow {
  readonly group: string;
  readonly row: Record<string, any>;
  reward: number | null;
}

/** Gives each reward of a group (in time order) to a call, per `match`; returns each call's matched reward. */
function matchRewards(calls: CallRow[], rewards: Record<string, any>[], match: RewardMatch): void {
  for (const reward of rewards) {
    const time = BigInt(reward.time_ns);
    // The latest call that ended before the reward and has none yet (among the reward's siblings).
    for (let i = calls.length - 1; i >= 0; i--) {
      const call = calls[i];
      if (call.reward !== null || call.row.end_ns === null || BigInt(call.row.end_ns) > time) continue;
      if (match === 'first_sibling' && call.row.parent_id !== reward.parent_id) continue;
      call.reward = Number(reward.value);
      break;
    }
  }
}

function credit(calls: CallRow[], rewards: Record<string, any>[], options: TripletOptions): (number | null)[] {
  switch (options.credit ?? 'step') {
    case 'step':
      return calls.map((c) => c.reward);
    case 'final': {
      const last = rewards.at(-1);
      const value = last === undefined ? null : Number(last.value);
      return calls.map(() => value);
    }
    case 'discounted': {
      const gamma = options.gamma ?? 1;
      const returns: (number | null)[] = new Array(calls.length).fill(null);
      let running: number | null = null;
      for (let i = calls.length - 1; i >= 0; i--) {
        const own = calls[i].reward;
        running = own === null && running === null ? null : (own ?? 0) + gamma * (running ?? 0);
        returns[i] = running;
      }
      return returns;
    }
  }
}

function triplet(r: Record<string, any>, reward: number | null): Triplet {
  const output = json(r.output_messages);
  return {
    prompt: { messages: json(r.input_messages), token_ids: ids(r.prompt_token_ids) },
    response: { message: Array.isArray(output) ? output[0] ?? null : output, token_ids: ids(r.response_token_ids), logprobs: Array.isArray(r.response_logprobs) ? r.response_logprobs.map(Number) : null },
    reward,
    metadata: {
      rollout_id: r.rollout_id ?? null,
      attempt_id: r.attempt_id ?? null,
      trace_id: r.trace_id,
      span_id: r.span_id,
      sequence_id: r.sequence_id === null ? null : Number(r.sequence_id),
      agent_name: r.agent_name ?? null,
      response_id: r.response_id ?? null,
      model: r.model ?? null,
    },
  };
}

function checkOptions(options: TripletOptions): void {
  if (options.rewardMatch !== undefined && !['first_occurrence', 'first_sibling'].includes(options.rewardMatch)) throw new TypeError(`rewardMatch must be first_occurrence or first_sibling, not "${options.rewardMatch}"`);
  if (options.credit !== undefined && !['step', 'final', 'discounted'].includes(options.credit)) throw new TypeError(`credit must be step, final or discounted, not "${options.credit}"`);
  if (options.gamma !== undefined && !(options.gamma >= 0 && options.gamma <= 1)) throw new TypeError(`gamma must be from 0 to 1, not ${options.gamma}`);
}

/** A selected LLM call (a row of `callsSql`) with the reward its credit gives it. */
export interface CreditedCall {
  readonly row: Record<string, any>;
  readonly reward: number | null;
}

/** Rows of a query that ends in a total ORDER BY, page by page (the query route caps one answer's rows). */
async function allRows(source: QuerySource, sql: string): Promise<Record<string, any>[]> {
  const rows: Record<string, any>[] = [];
  for (let offset = 0; ; offset += PAGE) {
    const page = (await source.query(`${sql} LIMIT ${PAGE} OFFSET ${offset}`)).rows;
    rows.push(...page);
    if (page.length < PAGE) return rows;
  }
}

const PAGE = 50_000;

/** The calls of every attempt that `options.where` selects, grouped by attempt, in call order, credited. */
export async function creditedCalls(source: QuerySource, options: TripletOptions = {}): Promise<CreditedCall[][]> {
  checkOptions(options);
  const callRows = await allRows(source, callsSql(options));
  const rewardRows = await allRows(source, rewardsSql(options));
  const rewardsByGroup = new Map<string, Record<string, any>[]>();
  for (const reward of rewardRows) {
    const list = rewardsByGroup.get(reward.group_id as string) ?? [];
    list.push(reward);
    rewardsByGroup.set(reward.group_id as string, list);
  }
  const groups: CreditedCall[][] = [];
  let start = 0;
  while (start < callRows.length) {
    const group = callRows[start].group_id as string;
    let end = start;
    while (end < callRows.length && callRows[end].group_id === group) end++;
    const calls: CallRow[] = callRows.slice(start, end).map((row) => ({ group, row, reward: null }));
    const rewards = rewardsByGroup.get(group) ?? [];
    matchRewards(calls, rewards, options.rewardMatch ?? 'first_occurrence');
    const credited = credit(calls, rewards, options);
    groups.push(calls.map((call, i) => ({ row: call.row, reward: credited[i] })));
    start = end;
  }
  return groups;
}

/** The triplets of every attempt that `options.where` selects, attempt by attempt. */
export async function traceToTriplets(source: QuerySource, options: TripletOptions = {}): Promise<Triplet[]> {
  return (await creditedCalls(source, options)).flatMap((calls) => calls.map((call) => triplet(call.row, call.reward)));
}
