/**
 * TraceToMessages: one OpenAI fine-tuning record per LLM call, `{messages, tools,
 * parallel_tool_calls}`: the call's input messages followed by the message the model answered.
 * SQL picks the calls (`llm_calls`, in rollout and call order); each record is then validated
 * here, and an invalid one is reported with the rollout and span that produced it, and skipped.
 */
import type { Adapter, SkippedRecord } from './adapter.js';
import { minRewardCondition } from '../sql/final-rewards.js';
import { jsonValue as json } from './json-column.js';
import type { QuerySource } from './source.js';
import { rolloutModeCondition, sqlText } from '../sql/literals.js';
import { LLM_CALLS_CTES } from '../sql/views.js';

export type { SkippedRecord };

export interface ChatRecord {
  messages: Record<string, unknown>[];
  tools?: unknown[];
  parallel_tool_calls?: boolean;
}

export interface MessagesOptions {
  /** A SQL condition on rollout_id, attempt_id, trace_id (and the other llm_calls columns). */
  readonly where?: string;
  /** Only attempts whose final reward is at least this. */
  readonly minReward?: number;
  /** Only rollouts of this mode (train, val, test). */
  readonly rolloutMode?: string;
}

/** The llm_calls rows a messages export reads, with the options' conditions. */
function callsWhere(options: MessagesOptions): string {
  const conditions = ['input_messages IS NOT NULL', 'output_messages IS NOT NULL'];
  if (options.where) conditions.push(`(${options.where})`);
  if (options.minReward !== undefined) conditions.push(minRewardCondition(options.minReward));
  if (options.rolloutMode !== undefined)
    conditions.push(
      `rollout_id IN (SELECT rollout_id FROM rollouts WHERE ${rolloutModeCondition('mode', options.rolloutMode)})`,
    );
  return conditions.join(' AND ');
}

const CALL_ORDER = 'ORDER BY rollout_id NULLS LAST, attempt_id, sequence_id, start_time, span_id';

function messagesSql(options: MessagesOptions): string {
  return `WITH ${LLM_CALLS_CTES} SELECT rollout_id, attempt_id, trace_id, span_id, input_messages, output_messages, tools
    FROM llm_calls WHERE ${callsWhere(options)} ${CALL_ORDER}`;
}

/** chatRecordOf in SQL: the input messages, then the first output message (a list of JSON values). */
const MESSAGE_LIST = `list_concat(
    CASE WHEN json_type(input_messages) = 'ARRAY' THEN json_extract(input_messages, '$[*]') ELSE []::JSON[] END,
    CASE WHEN json_type(output_messages) = 'ARRAY' AND json_array_length(output_messages) > 0
      THEN [json_extract(output_messages, '$[0]')] ELSE []::JSON[] END)`;

/**
 * MESSAGE_LIST as JSON text, pasted rather than parsed where the input is minified JSON text
 * of an empty list or a list of objects (what DuckDB's JSON functions write, so every derived
 * call): parsing the input into a list of values and writing it back was most of the CPU of
 * building a record. Any other text goes through MESSAGE_LIST.
 */
const MESSAGES_JSON = `CASE WHEN input_messages::VARCHAR = '[]' OR input_messages::VARCHAR LIKE '[{%}]'
    THEN ('[' || concat_ws(',', nullif((input_messages::VARCHAR)[2:-2], ''), output_messages->0) || ']')::JSON
    ELSE to_json(${MESSAGE_LIST}) END`;

const HAS_TOOLS = `(json_type(tools) = 'ARRAY' AND json_array_length(tools) > 0)`;

/** The fields of each message that SURELY_VALID reads, parsed once (a message that is not an object has them NULL). */
const MESSAGE_FIELDS = `'[{"role": "VARCHAR", "content": "JSON"}]'`;

/**
 * Rows whose record invalidReason surely finds valid (plain text messages of the four roles
 * without tool calls, the last the assistant's, tools each with a function name): the common
 * case, decided in SQL. The others are read into JS and checked there. Each column is parsed
 * once (json_transform), and no tool calls means no "tool_calls" in the text at all: a message
 * that merely mentions them is checked in JS.
 */
const SURELY_VALID = `(NOT contains(input_messages::VARCHAR, '"tool_calls"') AND NOT contains(output_messages::VARCHAR, '"tool_calls"')
    AND list_bool_and(list_transform(
      list_concat(json_transform(input_messages, ${MESSAGE_FIELDS}), json_transform(output_messages, ${MESSAGE_FIELDS})[1:1]),
      lambda m: coalesce(m.role IN ('system', 'developer', 'user', 'assistant') AND starts_with(m.content, '"'), false)))
    AND json_extract_string(output_messages, '$[0].role') = 'assistant'
    AND (tools IS NULL OR list_bool_and(list_transform(json_transform(tools, '[{"function": {"name": "JSON"}}]'),
      lambda t: coalesce(starts_with(t.function.name, '"'), false)))))`;

/**
 * The records as Parquet holds them (a record without tools: NULL in tools and
 * parallel_tool_calls), in call order, but for the calls `invalid` names (trace/span).
 */
function recordsSql(options: MessagesOptions, invalid: readonly string[]): string {
  const excluded =
    invalid.length === 0 ? '' : ` AND trace_id || '/' || span_id NOT IN (${invalid.map(sqlText).join(', ')})`;
  return `WITH ${LLM_CALLS_CTES} SELECT ${MESSAGES_JSON} AS messages,
      CASE WHEN ${HAS_TOOLS} THEN tools END AS tools,
      CASE WHEN ${HAS_TOOLS} THEN list_bool_or(list_transform(${MESSAGE_LIST}, lambda m: coalesce(
        json_type(m, '$.tool_calls') = 'ARRAY' AND json_array_length(m, '$.tool_calls') > 1, false))) END AS parallel_tool_calls
    FROM llm_calls WHERE ${callsWhere(options)}${excluded} ${CALL_ORDER}`;
}

/** The calls whose record SQL cannot vouch for, checked by invalidReason; the invalid ones go to `skipped`. */
async function invalidCalls(
  source: QuerySource,
  options: MessagesOptions,
  skipped: SkippedRecord[],
): Promise<string[]> {
  const sql = `WITH ${LLM_CALLS_CTES} SELECT rollout_id, attempt_id, trace_id, span_id, input_messages, output_messages, tools
    FROM llm_calls WHERE ${callsWhere(options)} AND NOT coalesce(${SURELY_VALID}, false) ${CALL_ORDER}`;
  const invalid: string[] = [];
  for await (const rows of source.stream(sql))
    for (const row of rows) {
      const reason = reasonOf(row);
      if (reason === null) continue;
      invalid.push(`${row.trace_id}/${row.span_id}`);
      skipped.push({ rollout_id: (row.rollout_id as string | null) ?? null, span_id: String(row.span_id), reason });
    }
  return invalid;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

/** A record as a row gives it, before `invalidReason` checked it. */
interface RecordCandidate {
  messages: unknown[];
  tools?: unknown[];
  parallel_tool_calls?: boolean;
}

/** Why `record` is not a valid fine-tuning record (a ChatRecord), or null when it is. */
export function invalidReason(record: RecordCandidate): string | null {
  if (!Array.isArray(record.messages) || record.messages.length === 0) return 'no messages';
  const callIds = new Set<string>();
  for (const [i, message] of record.messages.entries()) {
    const reason = invalidMessageReason(message, `message ${i}`, callIds);
    if (reason !== null) return reason;
  }
  if (fieldsOf(record.messages.at(-1)).role !== 'assistant') return "the last message is not the assistant's answer";
  if (
    record.tools !== undefined &&
    !(
      Array.isArray(record.tools) &&
      record.tools.every((tool) => typeof fieldsOf(fieldsOf(tool).function).name === 'string')
    )
  ) {
    return 'tools must be a list of {type: "function", function: {name, ...}}';
  }
  return null;
}

/** The fields of a parsed JSON object; none for anything else. */
const fieldsOf = (value: unknown): Record<string, unknown> =>
  typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};

/** Why one message (`where` in the record) is not valid, or null; adds the ids of its tool calls to `callIds`. */
function invalidMessageReason(message: unknown, where: string, callIds: Set<string>): string | null {
  if (message === null || typeof message !== 'object') return `${where} is not an object`;
  const { role, content, tool_calls: toolCalls, tool_call_id: toolCallId } = message as Record<string, unknown>;
  if (typeof role !== 'string' || !ROLES.has(role)) return `${where} has role ${JSON.stringify(role)}`;
  if (toolCalls !== undefined) {
    if (role !== 'assistant') return `${where}: only assistant messages have tool_calls`;
    if (!Array.isArray(toolCalls) || toolCalls.length === 0) return `${where}: tool_calls must be a non-empty list`;
    for (const call of toolCalls) {
      const reason = invalidToolCallReason(call, where);
      if (reason !== null) return reason;
      callIds.add(fieldsOf(call).id as string);
    }
  }
  const textOrParts =
    typeof content === 'string' ||
    (Array.isArray(content) && content.every((part) => typeof fieldsOf(part).type === 'string'));
  if (!textOrParts && !(content === null && toolCalls !== undefined)) return `${where} has no text content`;
  if (role === 'tool') {
    if (typeof toolCallId !== 'string') return `${where}: a tool result without tool_call_id`;
    if (!callIds.has(toolCallId))
      return `${where}: tool result for ${toolCallId}, which no earlier assistant message called`;
  }
  return null;
}

/** Why a tool call of message `where` is not valid, or null. */
function invalidToolCallReason(call: unknown, where: string): string | null {
  const { id, function: fn } = fieldsOf(call);
  if (typeof id !== 'string' || id === '') return `${where}: a tool call has no id`;
  const { name, arguments: args } = fieldsOf(fn);
  if (typeof name !== 'string' || name === '') return `${where}: tool call ${id} has no function name`;
  if (typeof args !== 'string') return `${where}: the arguments of tool call ${id} are not a JSON string`;
  try {
    JSON.parse(args);
  } catch {
    return `${where}: the arguments of tool call ${id} are not valid JSON`;
  }
  return null;
}

/** The record of one `llm_calls` row. */
function recordOf(row: Record<string, unknown>): RecordCandidate {
  return chatRecordOf(json(row.input_messages), json(row.output_messages), json(row.tools));
}

/** The record of one call: its input messages, then the first choice of its output (validate it with `invalidReason`). */
export function chatRecordOf(input: unknown, output: unknown, tools: unknown): RecordCandidate {
  const messages = [...(Array.isArray(input) ? input : []), ...(Array.isArray(output) ? output.slice(0, 1) : [])];
  const record: RecordCandidate = { messages };
  if (Array.isArray(tools) && tools.length > 0) {
    record.tools = tools;
    record.parallel_tool_calls = messages.some((m) => {
      const calls = fieldsOf(m).tool_calls;
      return Array.isArray(calls) && calls.length > 1;
    });
  }
  return record;
}

export interface MessagesStats {
  /** The calls whose record is not valid, each with its reason. */
  readonly skipped: SkippedRecord[];
}

/** A record with the rollout of its call. */
interface RolloutChatRecord {
  readonly rolloutId: string | null;
  readonly record: ChatRecord;
}

/** Why the record of one `llm_calls` row is not valid, or null. */
function reasonOf(row: Record<string, unknown>): string | null {
  try {
    return invalidReason(recordOf(row));
  } catch (error) {
    return `unreadable: ${(error as Error).message}`;
  }
}

/** The valid records of each batch of calls, with their rollouts; the others go to `skipped`. */
async function* recordBatches(
  source: QuerySource,
  sql: string,
  skipped: SkippedRecord[],
): AsyncGenerator<RolloutChatRecord[]> {
  for await (const rows of source.stream(sql)) {
    const records: RolloutChatRecord[] = [];
    for (const row of rows) {
      const rolloutId = (row.rollout_id as string | null) ?? null;
      const reason = reasonOf(row);
      // what invalidReason found valid
      if (reason === null) records.push({ rolloutId, record: recordOf(row) as ChatRecord });
      else skipped.push({ rollout_id: rolloutId, span_id: String(row.span_id), reason });
    }
    yield records;
  }
}

/**
 * TraceToMessages as an adapter: the valid records, in rollout and call order. Its `sql` gives
 * them as Parquet columns once the calls SQL cannot vouch for are checked here (the read does
 * that first, so that `stats` are complete at once); `batches` check every record in JS, for
 * JSON Lines (no key for a record without tools) and Arrow.
 */
export const MESSAGES_ADAPTER: Adapter<MessagesOptions, ChatRecord, MessagesStats> = {
  async read(source, options = {}) {
    const stats: MessagesStats = { skipped: [] };
    const sql = recordsSql(options, await invalidCalls(source, options, stats.skipped));
    async function* batches() {
      for await (const batch of recordBatches(source, messagesSql(options), [])) yield batch.map((r) => r.record);
    }
    return { sql, sqlFor: 'parquet', batches: batches(), stats };
  },
  report: ({ skipped }) => ({ skipped, notes: [] }),
};

/** The valid records, in order; the skipped ones, with their reasons, go to `skipped` as they are read. */
export async function* traceToMessages(
  source: QuerySource,
  options: MessagesOptions = {},
  skipped: SkippedRecord[] = [],
): AsyncGenerator<ChatRecord> {
  for await (const batch of recordBatches(source, messagesSql(options), skipped)) for (const r of batch) yield r.record;
}

/** traceToMessages with the rollout of each record: one query for the calls of many rollouts. */
export async function* traceToRolloutMessages(
  source: QuerySource,
  options: MessagesOptions = {},
  skipped: SkippedRecord[] = [],
): AsyncGenerator<RolloutChatRecord> {
  for await (const batch of recordBatches(source, messagesSql(options), skipped)) yield* batch;
}
