import { ATTR } from '../api/semconv.js';
import type { Span } from '../api/types.js';

/**
 * The LLM calls of spans read through the LightningStore (`querySpans`), for code that has a
 * store but no SQL (an algorithm whose store may be a server's client). It reads what agl itself
 * records, the exact HTTP exchange of its gateway and of its capture in the agent
 * (`agl.llm.request` / `.response`), as the `llm_calls` view does (sql/derived.ts, dialects 0
 * and 1): OpenAI chat messages, tools, and vLLM token ids and logprobs when the server returned
 * them. Calls recorded only by other instrumentations (GenAI semantic conventions, OpenLLMetry)
 * are not read here.
 */
export interface SpanLlmCall {
  readonly rollout_id: string;
  readonly attempt_id: string;
  readonly span_id: string;
  readonly model: string | null;
  readonly inputMessages: Record<string, unknown>[] | null;
  readonly outputMessages: Record<string, unknown>[] | null;
  readonly tools: unknown[] | null;
  readonly promptTokenIds: number[] | null;
  readonly responseTokenIds: number[] | null;
  readonly responseLogprobs: number[] | null;
}

type Json = Record<string, unknown>;

/** The value at `path` inside parsed JSON, undefined where the path does not exist. */
const at = (value: unknown, ...path: (string | number)[]): unknown =>
  path.reduce<unknown>(
    (inner, key) =>
      inner !== null && typeof inner === 'object' ? (inner as Record<string | number, unknown>)[key] : undefined,
    value,
  );

/** An attribute holding a JSON object: the text as recorded, or a value already parsed; undefined when unreadable. */
function jsonAttribute(value: unknown): Json | undefined {
  let parsed = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value);
    } catch {
      return undefined;
    }
  }
  return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Json) : undefined;
}

const numbers = (value: unknown): number[] | null =>
  Array.isArray(value) && value.every((n) => typeof n === 'number') ? value : null;
const messageList = (value: unknown): Json[] | null => (Array.isArray(value) ? value : null);
const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

function inputMessages(api: string, request: Json): Json[] | null {
  if (api === 'chat') return messageList(request.messages);
  if (api === 'text_completion')
    return request.prompt === undefined ? null : [{ role: 'user', content: request.prompt }];
  const system = typeof request.instructions === 'string' ? [{ role: 'system', content: request.instructions }] : [];
  if (typeof request.input === 'string') return [...system, { role: 'user', content: request.input }];
  return Array.isArray(request.input) ? [...system, ...request.input] : null;
}

function outputMessages(api: string, response: Json): Json[] | null {
  if (api === 'responses') return messageList(response.output);
  if (!Array.isArray(response.choices)) return null;
  if (api === 'chat') return response.choices.map((choice) => at(choice, 'message') as Json);
  return response.choices.map((choice) => ({ role: 'assistant', content: at(choice, 'text') }));
}

/** Logprobs of the sampled tokens: chat's `logprobs.content[].logprob`, completions' `token_logprobs`. */
function logprobsOf(logprobs: unknown): number[] | null {
  const content = at(logprobs, 'content');
  if (Array.isArray(content)) return numbers(content.map((entry) => at(entry, 'logprob')));
  return numbers(at(logprobs, 'token_logprobs'));
}

/** The call one span recorded, or null when it is no agl-recorded LLM call (or its bodies cannot be read). */
function llmCallOfSpan(span: Span): SpanLlmCall | null {
  const api = span.attributes[ATTR.llmApi];
  if (api !== 'chat' && api !== 'text_completion' && api !== 'responses') return null;
  const request = jsonAttribute(span.attributes[ATTR.llmRequest]);
  const response = jsonAttribute(span.attributes[ATTR.llmResponse]);
  if (!request || !response) return null;
  const choice = at(response, 'choices', 0);
  const model =
    text(response.model) ??
    text(request.model) ??
    text(span.attributes['gen_ai.response.model']) ??
    text(span.attributes['gen_ai.request.model']);
  return {
    rollout_id: span.rollout_id,
    attempt_id: span.attempt_id,
    span_id: span.span_id,
    model: model ?? null,
    inputMessages: inputMessages(api, request),
    outputMessages: outputMessages(api, response),
    tools: Array.isArray(request.tools) ? request.tools : null,
    promptTokenIds: numbers(
      response.prompt_token_ids ??
        at(choice, 'prompt_token_ids') ??
        at(response, 'provider_specific_fields', 'prompt_token_ids'),
    ),
    responseTokenIds: numbers(at(choice, 'token_ids') ?? at(choice, 'provider_specific_fields', 'token_ids')),
    responseLogprobs: logprobsOf(at(choice, 'logprobs')),
  };
}

/**
 * The calls of a rollout's spans, in call order. An agent's own capture of a call it made
 * through the gateway is its gateway span's parent: the gateway's call is kept (it holds the
 * exchange as sent upstream, token ids included), as in `llm_calls`.
 */
export function llmCallsOfSpans(spans: readonly Span[]): SpanLlmCall[] {
  const relayed = new Set(
    spans.filter((s) => s.attributes['agl.gateway'] === true && s.parent_id).map((s) => `${s.trace_id}/${s.parent_id}`),
  );
  const ordered = [...spans].sort((a, b) => (a.start_time ?? 0) - (b.start_time ?? 0) || a.sequence_id - b.sequence_id);
  const calls: SpanLlmCall[] = [];
  for (const span of ordered) {
    if (relayed.has(`${span.trace_id}/${span.span_id}`)) continue;
    const call = llmCallOfSpan(span);
    if (call) calls.push(call);
  }
  return calls;
}
