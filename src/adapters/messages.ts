/**
 * TraceToMessages: one OpenAI fine-tuning record per LLM call, `{messages, tools,
 * parallel_tool_calls}`: the call's input messages followed by the message the model answered.
 * SQL picks the calls (`llm_calls`, in rollout and call order); each record is then validated
 * here, and an invalid one is reported with the rollout and span that produced it, and skipped.
 */
import { jsonValue as json } from './json-column.js';
import type { QuerySource } from './source.js';
import { rolloutModeCondition } from '../store/sql.js';

export interface ChatRecord {
  messages: Record<string, unknown>[];
  tools?: unknown[];
  parallel_tool_calls?: boolean;
}

export interface SkippedRecord {
  readonly rollout_id: string | null;
  readonly span_id: string;
  readonly reason: string;
}

export interface MessagesOptions {
  /** A SQL condition on rollout_id, attempt_id, trace_id (and the other llm_calls columns). */
  readonly where?: string;
  /** Only attempts whose primary reward (the latest one) is at least this. */
  readonly minReward?: number;
  /** Only rollouts of this mode (train, val, test). */
  readonly rolloutMode?: string;
}

export function messagesSql(options: MessagesOptions): string {
  const conditions = ['input_messages IS NOT NULL', 'output_messages IS NOT NULL'];
  if (options.where) conditions.push(`(${options.where})`);
  if (options.minReward !== undefined) conditions.push(minRewardCondition(options.minReward));
  if (options.rolloutMode !== undefined) conditions.push(`rollout_id IN (SELECT rollout_id FROM rollouts WHERE ${rolloutModeCondition('mode', options.rolloutMode)})`);
  return `SELECT rollout_id, attempt_id, span_id, input_messages, output_messages, tools
    FROM llm_calls WHERE ${conditions.join(' AND ')}
    ORDER BY rollout_id NULLS LAST, attempt_id, sequence_id, start_time, span_id`;
}

/** An llm_calls condition: the call's attempt's latest primary reward is at least `minReward`. */
export function minRewardCondition(minReward: number): string {
  if (!Number.isFinite(minReward)) throw new TypeError('minReward must be a finite number');
  return `(SELECT r.value FROM rewards r WHERE r.rollout_id = llm_calls.rollout_id AND r.attempt_id IS NOT DISTINCT FROM llm_calls.attempt_id AND r.is_primary
    ORDER BY r.time DESC LIMIT 1) >= ${minReward}`;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool']);

/** Why `record` is not a valid fine-tuning record, or null when it is. */
export function invalidReason(record: ChatRecord): string | null {
  if (!Array.isArray(record.messages) || record.messages.length === 0) return 'no messages';
  const callIds = new Set<string>();
  for (const [i, message] of record.messages.entries()) {
    const where = `message ${i}`;
    if (message === null || typeof message !== 'object') return `${where} is not an object`;
    const role = message.role;
    if (typeof role !== 'string' || !ROLES.has(role)) return `${where} has role ${JSON.stringify(role)}`;
    const content = message.content;
    const toolCalls = message.tool_calls;
    if (toolCalls !== undefined) {
      if (role !== 'assistant') return `${where}: only assistant messages have tool_calls`;
      if (!Array.isArray(toolCalls) || toolCalls.length === 0) return `${where}: tool_calls must be a non-empty list`;
      for (const call of toolCalls as Record<string, any>[]) {
        if (typeof call?.id !== 'string' || call.id === '') return `${where}: a tool call has no id`;
        if (typeof call.function?.name !== 'string' || call.function.name === '') return `${where}: tool call ${call.id} has no function name`;
        if (typeof call.function.arguments !== 'string') return `${where}: the arguments of tool call ${call.id} are not a JSON string`;
        try {
          JSON.parse(call.function.arguments);
        } catch {
          return `${where}: the arguments of tool call ${call.id} are not valid JSON`;
        }
        callIds.add(call.id);
      }
    }
    const textOrParts = typeof content === 'string' || (Array.isArray(content) && content.every((part) => typeof part?.type === 'string'));
    if (!textOrParts && !(content === null && toolCalls !== undefined)) return `${where} has no text content`;
    if (role === 'tool') {
      if (typeof message.tool_call_id !== 'string') return `${where}: a tool result without tool_call_id`;
      if (!callIds.has(message.tool_call_id)) return `${where}: tool result for ${message.tool_call_id}, which no earlier assistant message called`;
    }
  }
  if (record.messages.at(-1)!.role !== 'assistant') return 'the last message is not the assistant\'s answer';
  if (record.tools !== undefined && !(Array.isArray(record.tools) && record.tools.every((tool: any) => typeof tool?.function?.name === 'string'))) {
    return 'tools must be a list of {type: "function", function: {name, ...}}';
  }
  return null;
}

/** The record of one `llm_calls` row. */
function recordOf(row: Record<string, unknown>): ChatRecord {
  return chatRecordOf(json(row.input_messages), json(row.output_messages), json(row.tools));
}

/** The record of one call: its input messages, then the first choice of its output (validate it with `invalidReason`). */
export function chatRecordOf(input: unknown, output: unknown, tools: unknown): ChatRecord {
  const messages = [...(Array.isArray(input) ? input : []), ...(Array.isArray(output) ? output.slice(0, 1) : [])];
  const record: ChatRecord = { messages };
  if (Array.isArray(tools) && tools.length > 0) {
    record.tools = tools;
    record.parallel_tool_calls = messages.some((m) => Array.isArray(m.tool_calls) && m.tool_calls.length > 1);
  }
  return record;
}

/** The valid records, in order, and the skipped ones with their reasons. */
export async function* traceToMessages(source: QuerySource, options: MessagesOptions = {}, skipped: SkippedRecord[] = []): AsyncGenerator<ChatRecord> {
  for await (const { record } of traceToRolloutMessages(source, options, skipped)) yield record;
}

/** traceToMessages with the rollout of each record: one query for the calls of many rollouts. */
export async function* traceToRolloutMessages(source: QuerySource, options: MessagesOptions = {}, skipped: SkippedRecord[] = []): AsyncGenerator<{ rolloutId: string | null; record: ChatRecord }> {
  for await (const rows of source.stream(messagesSql(options))) {
    for (const row of rows) {
      let record: ChatRecord;
      let reason: string | null;
      try {
        record = recordOf(row);
        reason = invalidReason(record);
      } catch (error) {
        record = { messages: [] };
        reason = `unreadable: ${(error as Error).message}`;
      }
      if (reason === null) yield { rolloutId: (row.rollout_id as string | null) ?? null, record };
      else skipped.push({ rollout_id: (row.rollout_id as string | null) ?? null, span_id: String(row.span_id), reason });
    }
  }
}
