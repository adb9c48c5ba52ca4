/**
 * TraceToTrajectory: token-level rows for an RL trainer (verl and the like), per attempt.
 * - `transition`: one row per LLM call.
 * - `trajectory`: consecutive calls merged while the next prompt starts with the previous
 *   prompt and response; the tokens inserted in between (tool output, chat template) join the
 *   response masked out (mask 0, logprob 0); a prompt that does not continue starts a new row.
 * A row's reward is the credited reward of its last call that has one; with `discounted`
 * credit, the return from its first call.
 * Calls without token ids are never turned into empty rows: they are counted, with their
 * rollouts, in the statistics (and end a merge). Rows over the length limits are truncated or
 * dropped, and counted too.
 * With `agentMatch`, calls of other agents are left out; in `trajectory` mode with
 * `otherAgents: 'mask'` they stay in the row as context instead, their responses masked out too
 * (a row with no trained token is left out and counted).
 */
import type { Adapter, AdapterReport } from './adapter.js';
import { allRows, type QuerySource } from './source.js';
import { CALL_ORDER, checkCallSelection, creditedCallsSql } from '../sql/credited-calls.js';
import { sqlRegex, sqlText } from '../sql/literals.js';
import { CALL_ROWS, derivedRowsOf, rolloutsIn, selectedCallRows } from '../sql/derived.js';
import { finalRewardsOf } from '../sql/final-rewards.js';
import { TOKEN_CALLS_CTES, tokenCallsCtes } from '../sql/views.js';
import { derivedSelection, type TripletOptions } from './triplets.js';

export interface TrajectoryOptions extends TripletOptions {
  readonly mode?: 'transition' | 'trajectory';
  readonly maxPromptLength?: number;
  readonly maxResponseLength?: number;
  /** What happens to a row over a limit (default truncate: the prompt keeps its end, the response its start). */
  readonly overlong?: 'truncate' | 'drop';
  /**
   * With `agentMatch` in `trajectory` mode: `drop` (default) leaves other agents' calls out,
   * `mask` keeps them in the row as context (mask 0). Transition rows always leave them out.
   */
  readonly otherAgents?: 'drop' | 'mask';
}

/** A row of token lists held as `Ids`, `Mask` and `Logprobs`. */
export interface TokenRow<Ids, Mask, Logprobs> {
  rollout_id: string | null;
  attempt_id: string | null;
  group_key: string;
  prompt_ids: Ids;
  response_ids: Ids;
  response_mask: Mask;
  response_logprobs: Logprobs;
  reward: number | null;
  /** How many LLM calls the row holds. */
  calls: number;
}

/** The adapter's row: lists as JS arrays. */
export type TrajectoryRow = TokenRow<number[], number[], number[]>;

/** A row with typed lists, as a GRPO batch takes them to Arrow (logprobs as the batch's float32). */
export type TypedTrajectoryRow = TokenRow<Int32Array, Int8Array, Float32Array>;

type AnyRow = TrajectoryRow | TypedTrajectoryRow;

export interface TrajectoryStats {
  calls: number;
  rows: number;
  truncated: number;
  dropped: number;
  /** Calls without prompt or response token ids, and the rollouts they came from. */
  missingTokenIds: number;
  missingTokenIdRollouts: string[];
  /** Rows of other agents' calls alone (otherAgents: mask), which have nothing to train: left out. */
  untrained: number;
}

/** Whether `prompt` starts with `before` and then `after`: the previous call's prompt and response. */
function continues(prompt: TokenList, before: TokenList, after: TokenList): boolean {
  if (prompt.length < before.length + after.length) return false;
  for (let i = 0; i < before.length; i++) if (prompt[i] !== before[i]) return false;
  for (let i = 0; i < after.length; i++) if (prompt[before.length + i] !== after[i]) return false;
  return true;
}
/** A list of token ids or logprobs as a source gives it: an array (elements may be null), or a typed array. */
type TokenList = ArrayLike<number>;
const isList = (value: unknown): value is ArrayLike<unknown> => Array.isArray(value) || ArrayBuffer.isView(value);
const tokenIds = (value: unknown) => (isList(value) && value.length > 0 ? (value as TokenList) : null);

/** One selected call (callsSql), with its credited reward (creditedCallsSql) and its place in call order. */
type Call = {
  group_id: string;
  task_key: unknown;
  rollout_id: string | null;
  attempt_id: string | null;
  trace_id: string;
  span_id: string;
  prompt_token_ids: unknown;
  response_token_ids: unknown;
  response_logprobs: unknown;
  reward: number | null;
  /** Whether the call's agent is trained (always, but with otherAgents: mask). */
  trained: boolean;
  /** Its place in call order; null on a row of token ids alone (callsSql). */
  pos: number | null;
};

const KEY_SELECT = `s.group_id, s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.reward, row_number() OVER (ORDER BY ${CALL_ORDER}) AS pos`;

/**
 * A row's group key: its task (rollout input), read from the rollouts view, which parses the
 * store's whole state history. An algorithm's batch (`attempts`) groups its rollouts itself:
 * its rows' key is the rollout id, and the history is not read at every batch.
 */
const groupKeySelect = (options: TrajectoryOptions) =>
  options.attempts ? 's.rollout_id AS task_key' : 's.group_key AS task_key';

/** Whether other agents' calls stay as masked context. */
const masksOtherAgents = (options: TrajectoryOptions) =>
  options.mode === 'trajectory' && options.otherAgents === 'mask' && options.agentMatch !== undefined;

/**
 * The query of the calls and their token ids, as kinds of rows in no order (a union by column
 * name): each selected call's keys and place (`pos`), and the token ids of the calls.
 * Joining them in DuckDB cost as much again as reading both (it hashed the token lists), and
 * sorting the calls with their token lists more (8 million token ids in a GRPO batch); one
 * statement keeps the spans not derived yet parsed once. Calls from GenAI log events, which
 * never carry token ids, are not read (TOKEN_CALLS_CTES). With masked context, every agent's
 * calls, each saying whether it is trained.
 * The token ids are read from the call rows (llm_call_rows) by span: only agl's own captures
 * (dialects 0 and 1) carry them, one row per span, so llm_calls' choice between rows of a span
 * need not be made again for them; made, it hashed the token lists again, and as a second read
 * of token_calls, DuckDB materialized it whole.
 */
function callsSql(options: TrajectoryOptions): string {
  const masks = masksOtherAgents(options);
  const trained = masks ? `regexp_matches(coalesce(s.agent_name, ''), ${sqlRegex(options.agentMatch ?? '')})` : 'true';
  // A batch's calls are its attempts' already (batchCallsSql): not selected again.
  const selection = { ...options, agentMatch: masks ? undefined : options.agentMatch, attempts: undefined };
  const select = `${KEY_SELECT}, ${groupKeySelect(options)}, ${trained} AS trained`;
  if (options.attempts) return batchCallsSql(options, options.attempts, selection, select);
  const keys = creditedCallsSql(selection, select, { calls: 'token_calls', withCall: false });
  return `WITH ${TOKEN_CALLS_CTES},
keys AS (${keys})
SELECT * FROM keys
UNION ALL BY NAME
SELECT ${TOKEN_COLUMNS} FROM ${CALL_ROWS} c`;
}

const TOKEN_COLUMNS = 'trace_id, span_id, prompt_token_ids, response_token_ids, response_logprobs';

/**
 * callsSql of an algorithm's batch (`attempts`), with a third kind of row: each attempt's final
 * reward (`final_reward`, finalRewards' rule), read in the same statement so that the rewards
 * of the spans not derived yet are derived once a batch. Every row comes from the batch's
 * rollouts alone (derivedRowsOf): of the spans not derived yet, their calls, rewards and agents,
 * not every rollout's waiting for the deriver. The ids are named once (`batch_attempts`), and
 * the attempts' calls are read once for the credited calls, without their token ids and
 * messages (unless a `where` may name them).
 */
function batchCallsSql(
  options: TrajectoryOptions,
  attempts: NonNullable<TrajectoryOptions['attempts']>,
  selection: TrajectoryOptions,
  select: string,
): string {
  const spans = rolloutsIn('batch_attempts');
  const rows = derivedRowsOf(spans);
  const ids = (list: string[]) => `unnest(from_json(${sqlText(JSON.stringify(list))}, '["VARCHAR"]'))`;
  const columns = options.where === undefined ? `* EXCLUDE (${HEAVY_COLUMNS})` : '*';
  const keys = creditedCallsSql(selection, select, {
    calls: 'batch_calls',
    rewards: 'batch_rewards',
    agents: `(${rows.agents})`,
    withCall: false,
  });
  return `WITH batch_attempts AS MATERIALIZED (
  SELECT ${ids(attempts.map((a) => a.rolloutId))} AS rollout_id, ${ids(attempts.map((a) => a.attemptId))} AS attempt_id
),
${tokenCallsCtes(spans)},
batch_calls AS MATERIALIZED (SELECT ${columns} FROM token_calls c WHERE attempt_id IN (SELECT attempt_id FROM batch_attempts)),
batch_rewards AS MATERIALIZED (${rows.rewards}),
keys AS (${keys})
SELECT * FROM keys
UNION ALL BY NAME
SELECT ${TOKEN_COLUMNS} FROM ${selectedCallRows(spans)} c
UNION ALL BY NAME
SELECT rollout_id, attempt_id, reward AS final_reward FROM (${finalRewardsOf('attempt', 'batch_rewards')})`;
}

/** The columns of token_calls that the credited calls need not read. */
const HEAVY_COLUMNS = 'input_messages, output_messages, tools, prompt_token_ids, response_token_ids, response_logprobs';

/** Every selected call with its token ids, in call order; with `attempts`, their final rewards by attempt id. */
async function orderedCalls(
  source: QuerySource,
  options: TrajectoryOptions,
  typedLists: boolean,
): Promise<{ calls: Call[]; finals: Map<string, number> }> {
  const calls: Call[] = [];
  const tokens = new Map<string, Call>();
  const finals = new Map<string, number>();
  for await (const batch of source.stream(callsSql(options), { typedLists }))
    for (const row of batch as (Call & { final_reward?: number | null })[]) {
      if (typeof row.final_reward === 'number') finals.set(row.attempt_id ?? '', row.final_reward);
      else if (row.pos === null) tokens.set(`${row.trace_id}/${row.span_id}`, row);
      else calls.push(row);
    }
  for (const call of calls) {
    const own = tokens.get(`${call.trace_id}/${call.span_id}`);
    call.prompt_token_ids = own?.prompt_token_ids ?? null;
    call.response_token_ids = own?.response_token_ids ?? null;
    call.response_logprobs = own?.response_logprobs ?? null;
  }
  return { calls: calls.sort((a, b) => (a.pos ?? 0) - (b.pos ?? 0)), finals };
}

/** A call of a row: its prompt's tokens from `from` on (inserted after the previous call: tool output, chat template) join the response masked out, then its response. */
type Part = { call: Call; prompt: TokenList; from: number; response: TokenList };

/** How a row's lists are made: JS arrays (the adapter's rows) or typed arrays (a GRPO batch's). */
interface RowLists<Row extends AnyRow> {
  /** Whether the source is asked for typed lists (StreamOptions). */
  readonly typedInput: boolean;
  /** The row's prompt, from its first call's. */
  prompt(ids: TokenList): Row['prompt_ids'];
  response(length: number): Pick<Row, 'response_ids' | 'response_mask' | 'response_logprobs'>;
}

const ARRAY_LISTS: RowLists<TrajectoryRow> = {
  typedInput: false,
  prompt: (ids) => (Array.isArray(ids) ? ids : Array.from(ids)),
  response: (length) => ({
    response_ids: new Array(length),
    response_mask: new Array(length),
    response_logprobs: new Array(length),
  }),
};

/** A null element (a list DuckDB could not cast whole) is 0, as Arrow's typed columns took it. */
const TYPED_LISTS: RowLists<TypedTrajectoryRow> = {
  typedInput: true,
  prompt: (ids) => new Int32Array(ids),
  response: (length) => ({
    response_ids: new Int32Array(length),
    response_mask: new Int8Array(length),
    response_logprobs: new Float32Array(length),
  }),
};

/**
 * The row of calls merged in order, the first one's prompt its prompt. Built once its last call
 * is known, each list allocated at its length and filled: grown call by call, the lists of a
 * GRPO batch (millions of tokens) were copied as they grew and most of its garbage.
 * A call not trained has mask and logprobs 0.
 */
function rowOf<Row extends AnyRow>(parts: readonly Part[], discounted: boolean, lists: RowLists<Row>): Row {
  let length = 0;
  for (const { prompt, from, response } of parts) length += prompt.length - from + response.length;
  const made = lists.response(length);
  const ids: { [at: number]: number } = made.response_ids;
  const mask: { [at: number]: number } = made.response_mask;
  const logprobs: { [at: number]: number } = made.response_logprobs;
  const [{ call: first }] = parts;
  let reward = first.reward;
  let at = 0;
  for (let k = 0; k < parts.length; k++) {
    const { call, prompt, from, response } = parts[k];
    for (let i = from; i < prompt.length; i++, at++) {
      ids[at] = prompt[i];
      mask[at] = 0;
      logprobs[at] = 0;
    }
    const given =
      call.trained && isList(call.response_logprobs) ? (call.response_logprobs as ArrayLike<unknown>) : NO_LOGPROBS;
    const bit = call.trained ? 1 : 0;
    for (let i = 0; i < response.length; i++, at++) {
      ids[at] = response[i];
      mask[at] = bit;
      // The first call's logprobs as numbers; merged ones as given.
      logprobs[at] = (k === 0 ? (i < given.length ? Number(given[i]) : 0) : (given[i] ?? 0)) as number;
    }
    if (k > 0 && !discounted && call.reward !== null) reward = call.reward;
  }
  return {
    rollout_id: first.rollout_id ?? null,
    attempt_id: first.attempt_id ?? null,
    group_key: String(first.task_key),
    prompt_ids: lists.prompt(parts[0].prompt),
    ...made,
    reward,
    calls: parts.length,
  } as Row;
}

/** The CTE `calls` (the selected calls with their token ids) and the order of calls in a group over its columns. */
interface TokenCalls {
  readonly ctes: string;
  readonly order: string;
}

/**
 * The selected calls, each with its group, task key, reward, whether it is trained and its token
 * ids. With the default options and every span derived, the deriver's answer per call
 * (derived_calls, as triplets read it) instead of the credited-calls query, which cost about 6 us
 * of CPU a call.
 */
async function tokenCallsSql(source: QuerySource, options: TrajectoryOptions): Promise<TokenCalls> {
  const tokens = 'c.prompt_token_ids, c.response_token_ids, c.response_logprobs';
  if (await derivedSelection(source, options))
    return {
      ctes: `calls AS (
  SELECT c.group_id, c.rollout_id, c.attempt_id, c.trace_id, c.sequence_id, c.start_time, c.span_id, c.reward, true AS trained, ${tokens},
    coalesce(md5(CAST(ro.input AS VARCHAR)), c.rollout_id, 'trace:' || c.trace_id) AS task_key
  FROM derived_calls c LEFT JOIN (SELECT rollout_id, input FROM rollouts) ro USING (rollout_id) WHERE c.in_triplets
)`,
      order: CALL_ORDER.replaceAll('s.', ''),
    };
  const masks = masksOtherAgents(options);
  const trained = masks ? `regexp_matches(coalesce(s.agent_name, ''), ${sqlRegex(options.agentMatch ?? '')})` : 'true';
  const selection = masks ? { ...options, agentMatch: undefined } : options;
  const select = `${KEY_SELECT}, ${groupKeySelect(options)}, ${trained} AS trained, ${tokens}`;
  return {
    ctes: `${TOKEN_CALLS_CTES},\ncalls AS (${creditedCallsSql(selection, select, { calls: 'token_calls' })})`,
    order: 'group_id, pos',
  };
}

const HAS_IDS = 'coalesce(len(prompt_token_ids) > 0 AND len(response_token_ids) > 0, false)';

/**
 * CTEs from `calls` to `parts` (trajectory mode): each call with token ids as a part of its row
 * (`row_pos`, the place of the row's first call in its group). A call continues the row when the
 * call before it in its group has token ids and its prompt starts with that call's prompt and
 * response; `inserted` is then where its own tokens start, those before being the previous
 * call's.
 */
function partsSql({ ctes, order }: TokenCalls): string {
  return `${ctes},
flagged AS (SELECT *, ${HAS_IDS} AS has_ids, row_number() OVER (PARTITION BY group_id ORDER BY ${order}) AS call_pos FROM calls),
linked AS (
  SELECT *, coalesce(lag(has_ids) OVER w AND has_ids AND len(prompt_token_ids) >= lag(len(prompt_token_ids) + len(response_token_ids)) OVER w
    AND prompt_token_ids[1:lag(len(prompt_token_ids) + len(response_token_ids)) OVER w] = list_concat(lag(prompt_token_ids) OVER w, lag(response_token_ids) OVER w), false) AS continues,
    lag(len(prompt_token_ids) + len(response_token_ids)) OVER w AS previous_length
  FROM flagged WINDOW w AS (PARTITION BY group_id ORDER BY call_pos)
),
parts AS (
  SELECT * EXCLUDE (previous_length), CASE WHEN continues THEN previous_length ELSE len(prompt_token_ids) END AS inserted,
    max(CASE WHEN NOT continues THEN call_pos END) OVER (PARTITION BY group_id ORDER BY call_pos ROWS UNBOUNDED PRECEDING) AS row_pos
  FROM linked WHERE has_ids
)`;
}

/** Whether a row (its prompt and response lengths) is over a length limit. */
function overlongSql(options: TrajectoryOptions, prompt: string, response: string): string {
  const over = [
    options.maxPromptLength !== undefined ? `${prompt} > ${options.maxPromptLength}` : '',
    options.maxResponseLength !== undefined ? `${response} > ${options.maxResponseLength}` : '',
  ].filter(Boolean);
  return over.length ? `(${over.join(' OR ')})` : 'false';
}

/** A call's mask and logprobs over its response: 1 and its logprobs (0 where none) when trained, else 0s. */
const RESPONSE_MASK = `list_resize([]::TINYINT[], len(response_token_ids), CASE WHEN trained THEN 1 ELSE 0 END)`;
const RESPONSE_LOGPROBS = `CASE WHEN trained THEN list_resize(list_transform(coalesce(response_logprobs, []::DOUBLE[]), lambda x: coalesce(x, 0)), len(response_token_ids), 0)
    ELSE list_resize([]::DOUBLE[], len(response_token_ids), 0) END`;

/**
 * The rows of trajectory mode, in their groups' order (`group_id`, `row_pos`): each row's parts
 * gathered with their places and put in order in the row (an aggregate ordered per group cost
 * 25 us a row), the inserted tokens of a continuing part masked out with logprob 0.
 */
function mergedRowsSql(calls: TokenCalls, options: TrajectoryOptions): string {
  const reward =
    options.credit === 'discounted'
      ? 'arg_min_null(reward, call_pos)'
      : 'arg_max(reward, call_pos) FILTER (WHERE reward IS NOT NULL)';
  return `WITH ${partsSql(calls)},
gathered AS (
  SELECT group_id, row_pos, arg_min_null(rollout_id, call_pos) AS rollout_id, arg_min_null(attempt_id, call_pos) AS attempt_id,
    arg_min_null(task_key, call_pos)::VARCHAR AS group_key, arg_min(prompt_token_ids, call_pos) AS prompt_ids,
    list_sort(list({'pos': call_pos, 'ids': prompt_token_ids[inserted + 1:] || response_token_ids,
      'mask': list_resize([]::TINYINT[], len(prompt_token_ids) - inserted, 0) || ${RESPONSE_MASK},
      'logprobs': list_resize([]::DOUBLE[], len(prompt_token_ids) - inserted, 0) || ${RESPONSE_LOGPROBS}})) AS parts,
    ${reward} AS reward, count(*)::INTEGER AS calls
  FROM parts GROUP BY group_id, row_pos HAVING bool_or(trained)
)
SELECT group_id, row_pos, rollout_id, attempt_id, group_key, prompt_ids, flatten(list_transform(parts, lambda p: p.ids)) AS response_ids,
  flatten(list_transform(parts, lambda p: p.mask)) AS response_mask, flatten(list_transform(parts, lambda p: p.logprobs)) AS response_logprobs,
  reward, calls
FROM gathered`;
}

/** The rows of transition mode: one per call with token ids, in call order. */
function transitionRowsSql({ ctes, order }: TokenCalls): string {
  return `WITH ${ctes}
SELECT ${order.replace(' NULLS LAST', '')}, rollout_id, attempt_id, task_key::VARCHAR AS group_key, prompt_token_ids AS prompt_ids,
  response_token_ids AS response_ids, ${RESPONSE_MASK} AS response_mask, ${RESPONSE_LOGPROBS} AS response_logprobs, reward, 1 AS calls
FROM calls WHERE ${HAS_IDS}`;
}

/**
 * The rows as the export writes them (the Parquet columns of PARQUET_COLUMNS.trajectories), in
 * call order of their first calls: TraceToTrajectory in SQL, so that no token passes through JS.
 */
function rowsSql(calls: TokenCalls, options: TrajectoryOptions): string {
  const merged = options.mode === 'trajectory';
  const rows = merged ? mergedRowsSql(calls, options) : transitionRowsSql(calls);
  const { maxPromptLength: p, maxResponseLength: r } = options;
  const cut = (column: string) => (r !== undefined ? `${column}[1:${r}]` : column);
  const fitted =
    options.overlong === 'drop'
      ? `SELECT * FROM rows WHERE NOT ${overlongSql(options, 'len(prompt_ids)', 'len(response_ids)')}`
      : `SELECT * REPLACE (${p !== undefined ? `CASE WHEN len(prompt_ids) > ${p} THEN prompt_ids[-${p}:] ELSE prompt_ids END` : 'prompt_ids'} AS prompt_ids,
    ${cut('response_ids')} AS response_ids, ${cut('response_mask')} AS response_mask, ${cut('response_logprobs')} AS response_logprobs) FROM rows`;
  return `WITH rows AS (${rows})
SELECT rollout_id, attempt_id, group_key, prompt_ids::INTEGER[] AS prompt_ids, response_ids::INTEGER[] AS response_ids,
  response_mask::TINYINT[] AS response_mask, response_logprobs::DOUBLE[] AS response_logprobs, reward::DOUBLE AS reward, calls::INTEGER AS calls
FROM (${fitted}) ORDER BY ${merged ? 'group_id, row_pos' : calls.order}`;
}

/** The statistics of rowsSql's read, from the lengths of the rows alone. */
function statsSql(calls: TokenCalls, options: TrajectoryOptions): string {
  const overlong = overlongSql(options, 'prompt_length', 'response_length');
  const rowLengths =
    options.mode === 'trajectory'
      ? `SELECT arg_min(len(prompt_token_ids), call_pos) AS prompt_length,
    sum(len(prompt_token_ids) - inserted + len(response_token_ids)) AS response_length, bool_or(trained) AS trained
  FROM parts GROUP BY group_id, row_pos`
      : `SELECT len(prompt_token_ids) AS prompt_length, len(response_token_ids) AS response_length, trained FROM flagged WHERE has_ids`;
  const ctes =
    options.mode === 'trajectory'
      ? partsSql(calls)
      : `${calls.ctes},\nflagged AS (SELECT *, ${HAS_IDS} AS has_ids FROM calls)`;
  return `WITH ${ctes},
row_lengths AS (${rowLengths}),
missing AS (
  SELECT coalesce(rollout_id, 'trace:' || trace_id) AS rollout, min((${calls.order.replace(' NULLS LAST', '')})) AS first FROM flagged WHERE NOT has_ids GROUP BY rollout
)
SELECT (SELECT count(*) FROM flagged) AS calls, (SELECT count(*) FROM flagged WHERE NOT has_ids) AS missing,
  (SELECT coalesce(list(rollout ORDER BY first), []) FROM missing) AS missing_rollouts,
  count(*) FILTER (WHERE NOT trained) AS untrained, count(*) FILTER (WHERE trained AND ${overlong}) AS overlong,
  count(*) FILTER (WHERE trained) AS trained
FROM row_lengths`;
}

const NO_LOGPROBS: ArrayLike<unknown> = [];

function checkOptions(options: TrajectoryOptions): void {
  if (options.mode !== undefined && options.mode !== 'transition' && options.mode !== 'trajectory')
    throw new TypeError(`mode must be transition or trajectory, not "${options.mode}"`);
  if (options.overlong !== undefined && options.overlong !== 'truncate' && options.overlong !== 'drop')
    throw new TypeError(`overlong must be truncate or drop, not "${options.overlong}"`);
  if (options.otherAgents !== undefined && options.otherAgents !== 'drop' && options.otherAgents !== 'mask')
    throw new TypeError(`otherAgents must be drop or mask, not "${options.otherAgents}"`);
  for (const key of ['maxPromptLength', 'maxResponseLength'] as const) {
    const value = options[key];
    if (value !== undefined && !(Number.isInteger(value) && value > 0))
      throw new TypeError(`${key} must be a whole number above 0, not ${value}`);
  }
}

/** The length limits of rows. */
type RowLimits = Pick<TrajectoryOptions, 'maxPromptLength' | 'maxResponseLength'>;

/** Whether a row is over a length limit. */
export const isOverlong = (row: AnyRow, limits: RowLimits): boolean =>
  (limits.maxPromptLength !== undefined && row.prompt_ids.length > limits.maxPromptLength) ||
  (limits.maxResponseLength !== undefined && row.response_ids.length > limits.maxResponseLength);

/** Cuts a row to the limits: the prompt keeps its end, the response (mask, logprobs) its start. */
export function truncateRow(row: AnyRow, limits: RowLimits): void {
  const { maxPromptLength: p, maxResponseLength: r } = limits;
  // A list's own slice keeps its kind (a JS array or a typed array).
  const lists = row as unknown as Record<(typeof LIST_NAMES)[number], Sliceable>;
  if (p !== undefined && row.prompt_ids.length > p) lists.prompt_ids = lists.prompt_ids.slice(-p);
  if (r !== undefined && row.response_ids.length > r)
    for (const name of RESPONSE_LISTS) lists[name] = lists[name].slice(0, r);
}

type Sliceable = { slice(start: number, end?: number): Sliceable };
const RESPONSE_LISTS = ['response_ids', 'response_mask', 'response_logprobs'] as const;
const LIST_NAMES = ['prompt_ids', ...RESPONSE_LISTS] as const;

/** Applies the length limits; false when the row is dropped. */
function fitLimits(row: AnyRow, options: TrajectoryOptions, stats: TrajectoryStats): boolean {
  if (!isOverlong(row, options)) return true;
  if (options.overlong === 'drop') {
    stats.dropped++;
    return false;
  }
  truncateRow(row, options);
  stats.truncated++;
  return true;
}

/**
 * TraceToTrajectory as an adapter, for `agl export`: SQL builds the rows (rowsSql) and counts
 * them (statsSql, read first, so that `stats` are complete at once); `batches` stream the rows
 * of that SQL.
 */
export const TRAJECTORIES_ADAPTER: Adapter<TrajectoryOptions, TrajectoryRow, TrajectoryStats> = {
  async read(source, options = {}) {
    checkOptions(options);
    checkCallSelection(options);
    const calls = await tokenCallsSql(source, options);
    const [counts] = await allRows(source, statsSql(calls, options));
    const overlong = Number(counts.overlong);
    const stats: TrajectoryStats = {
      calls: Number(counts.calls),
      rows: Number(counts.trained) - (options.overlong === 'drop' ? overlong : 0),
      truncated: options.overlong === 'drop' ? 0 : overlong,
      dropped: options.overlong === 'drop' ? overlong : 0,
      missingTokenIds: Number(counts.missing),
      missingTokenIdRollouts: counts.missing_rollouts as string[],
      untrained: Number(counts.untrained),
    };
    const sql = rowsSql(calls, options);
    async function* batches() {
      for await (const batch of source.stream(sql)) yield batch as unknown as TrajectoryRow[];
    }
    return { sql, sqlFor: 'parquet', batches: batches(), stats };
  },
  report: reportOf,
};

/**
 * Rows built in JS and their statistics; with `attempts`, each attempt's final reward too (by
 * attempt id, as finalRewards reads it per attempt), read in the statement of the rows.
 */
export interface BuiltTrajectories<Row extends AnyRow> {
  readonly rows: Row[];
  readonly stats: TrajectoryStats;
  readonly finals: Map<string, number>;
}

/**
 * The rows and statistics of TraceToTrajectory, built in JS from the calls' token ids as DuckDB
 * gives them: the same rows as the adapter's SQL (test/adapters/trajectories.test.ts holds the
 * two to each other).
 */
export function traceToTrajectories(
  source: QuerySource,
  options: TrajectoryOptions = {},
): Promise<BuiltTrajectories<TrajectoryRow>> {
  return buildRows(source, options, ARRAY_LISTS);
}

/**
 * TraceToTrajectory's rows with typed lists, read as typed arrays where the source can give them:
 * a GRPO batch's rows (millions of tokens), on their way to Arrow.
 */
export function typedTrajectories(
  source: QuerySource,
  options: TrajectoryOptions = {},
): Promise<BuiltTrajectories<TypedTrajectoryRow>> {
  return buildRows(source, options, TYPED_LISTS);
}

async function buildRows<Row extends AnyRow>(
  source: QuerySource,
  options: TrajectoryOptions,
  lists: RowLists<Row>,
): Promise<BuiltTrajectories<Row>> {
  checkOptions(options);
  const builder = new RowBuilder(options, lists);
  const { calls, finals } = await orderedCalls(source, options, lists.typedInput);
  for (const call of calls) builder.add(call);
  return { ...builder.finish(), finals };
}

function reportOf(stats: TrajectoryStats): AdapterReport {
  const notes = [
    `${stats.calls} call(s) into ${stats.rows} row(s); ${stats.truncated} truncated, ${stats.dropped} dropped over the length limits`,
  ];
  if (stats.missingTokenIds > 0) {
    const rollouts = stats.missingTokenIdRollouts;
    notes.push(
      `${stats.missingTokenIds} call(s) without token ids left out (rollouts: ${rollouts.slice(0, 5).join(', ')}${rollouts.length > 5 ? ', ...' : ''}); record through the gateway with --return-token-ids or AGL_RETURN_TOKEN_IDS=1`,
    );
  }
  return { skipped: [], notes };
}

/** Rows from calls in call order: a row per call, or continuing calls merged into the open row. */
class RowBuilder<Row extends AnyRow> {
  private readonly stats: TrajectoryStats = {
    calls: 0,
    rows: 0,
    truncated: 0,
    dropped: 0,
    missingTokenIds: 0,
    missingTokenIdRollouts: [],
    untrained: 0,
  };
  private readonly missingRollouts = new Set<string>();
  private readonly rows: Row[] = [];
  private group: unknown;
  /** The calls of the row being merged. */
  private open: Part[] | undefined;
  /** The previous call's prompt and response, which a continuing call's prompt starts with. */
  private previous: { prompt: TokenList; response: TokenList } = { prompt: [], response: [] };

  constructor(
    private readonly options: TrajectoryOptions,
    private readonly lists: RowLists<Row>,
  ) {}

  add(call: Call): void {
    this.stats.calls++;
    if (call.group_id !== this.group) {
      this.emit();
      this.group = call.group_id;
    }
    const prompt = tokenIds(call.prompt_token_ids);
    const response = tokenIds(call.response_token_ids);
    if (!prompt || !response) {
      this.stats.missingTokenIds++;
      this.missingRollouts.add(call.rollout_id ?? `trace:${call.trace_id}`);
      this.emit();
      return;
    }
    const { prompt: before, response: after } = this.previous;
    if (this.options.mode === 'trajectory' && this.open && continues(prompt, before, after)) {
      this.open.push({ call, prompt, from: before.length + after.length, response });
    } else {
      this.emit();
      this.open = [{ call, prompt, from: prompt.length, response }];
    }
    this.previous = { prompt, response };
  }

  finish(): { rows: Row[]; stats: TrajectoryStats } {
    this.emit();
    this.stats.rows = this.rows.length;
    this.stats.missingTokenIdRollouts = [...this.missingRollouts];
    return { rows: this.rows, stats: this.stats };
  }

  /** Ends the open row: kept (within the limits), or counted as left out. */
  private emit(): void {
    const parts = this.open;
    this.open = undefined;
    if (!parts) return;
    const row = rowOf(parts, this.options.credit === 'discounted', this.lists);
    if (!row.response_mask.includes(1)) this.stats.untrained++;
    else if (fitLimits(row, this.options, this.stats)) this.rows.push(row);
  }
}
