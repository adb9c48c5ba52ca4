/**
 * What an OpenAI-style HTTP exchange says about an LLM call: which API it used, the request's
 * sampling parameters, and, from the response (a JSON body or SSE chunks assembled into the same
 * shape), id, model, finish reasons and usage. Used by the fetch capture and the gateway alike.
 */
import type { Attributes } from '@opentelemetry/api';
import { ATTR } from '../api/semconv.js';

export type LlmApi = 'chat' | 'text_completion' | 'responses' | 'embeddings';

const API_BY_PATH: [RegExp, LlmApi][] = [
  [/\/chat\/completions$/, 'chat'],
  [/\/completions$/, 'text_completion'],
  [/\/responses$/, 'responses'],
  [/\/embeddings$/, 'embeddings'],
];

/** The LLM API a POST to `pathname` calls, or undefined when it is not one. */
export function llmApiOf(pathname: string): LlmApi | undefined {
  const path = pathname.endsWith('/') ? pathname.slice(0, -1) : pathname;
  return API_BY_PATH.find(([pattern]) => pattern.test(path))?.[1];
}

const REQUEST_PARAMETERS: [string, string][] = [
  ['temperature', 'gen_ai.request.temperature'],
  ['top_p', 'gen_ai.request.top_p'],
  ['max_tokens', 'gen_ai.request.max_tokens'],
  ['max_completion_tokens', 'gen_ai.request.max_tokens'],
  ['max_output_tokens', 'gen_ai.request.max_tokens'],
  ['frequency_penalty', 'gen_ai.request.frequency_penalty'],
  ['presence_penalty', 'gen_ai.request.presence_penalty'],
  ['seed', 'gen_ai.request.seed'],
  ['n', 'gen_ai.request.choice.count'],
];

// Parsed URLs, read-only: an app or a gateway calls a handful of endpoints, and parsing is on
// every call's path.
const parsedUrls = new Map<string, URL>();

/** `new URL(text)`, parsed once per distinct text (throws as `new URL` does). */
export function parsedUrl(text: string): URL {
  let url = parsedUrls.get(text);
  if (!url) {
    if (parsedUrls.size >= 256) parsedUrls.clear();
    url = new URL(text);
    parsedUrls.set(text, url);
  }
  return url;
}

/** The fields of a JSON object; a body's parts are unknown until a check says otherwise. */
type Fields = Record<string, unknown>;
const isFields = (value: unknown): value is Fields => typeof value === 'object' && value !== null;
/** The fields of `value` when it is an object, else none (a part missing or malformed). */
const fieldsOf = (value: unknown): Fields => (isFields(value) ? value : {});

export function requestAttributes(api: LlmApi, body: unknown): Attributes {
  const attributes: Attributes = { 'gen_ai.operation.name': api === 'responses' ? 'chat' : api };
  const request = fieldsOf(body);
  if (typeof request.model === 'string') attributes['gen_ai.request.model'] = request.model;
  for (const [field, key] of REQUEST_PARAMETERS) {
    const value = request[field];
    if (typeof value === 'number') attributes[key] = value;
  }
  const stop = request.stop;
  if (typeof stop === 'string') attributes['gen_ai.request.stop_sequences'] = [stop];
  else if (Array.isArray(stop))
    attributes['gen_ai.request.stop_sequences'] = stop.filter((s): s is string => typeof s === 'string');
  return attributes;
}

function responseAttributes(response: unknown): Attributes {
  const attributes: Attributes = {};
  const { id, model, choices, status, usage } = fieldsOf(response);
  if (typeof id === 'string') attributes['gen_ai.response.id'] = id;
  if (typeof model === 'string') attributes['gen_ai.response.model'] = model;
  const reasons = Array.isArray(choices)
    ? choices.map((c) => fieldsOf(c).finish_reason).filter((r): r is string => typeof r === 'string')
    : typeof status === 'string'
      ? [status]
      : [];
  if (reasons.length > 0) attributes['gen_ai.response.finish_reasons'] = reasons;
  const tokens = fieldsOf(usage);
  const input = tokens.prompt_tokens ?? tokens.input_tokens;
  const output = tokens.completion_tokens ?? tokens.output_tokens;
  if (typeof input === 'number') attributes['gen_ai.usage.input_tokens'] = input;
  if (typeof output === 'number') attributes['gen_ai.usage.output_tokens'] = output;
  return attributes;
}

/**
 * What an LLM answer adds to its span: the response attributes and, with `content`, the body
 * itself (`agl.llm.response`: the JSON text as received, or the assembled stream); or, for an
 * error status, the error to record.
 */
export function answerOutcome(
  status: number,
  body: string | unknown,
  streamed: boolean,
  content: boolean,
): { attributes: Attributes; error?: { message: string; type: string } } {
  if (status >= 400)
    return {
      attributes: {},
      error: {
        message: errorMessageOf(typeof body === 'string' ? body : '') || `HTTP ${status}`,
        type: String(status),
      },
    };
  let result: unknown = body;
  if (!streamed) {
    try {
      result = JSON.parse(body as string);
    } catch {
      return { attributes: {} };
    }
  }
  if (result === undefined) return { attributes: {} };
  const attributes = responseAttributes(result);
  if (content) attributes[ATTR.llmResponse] = streamed ? JSON.stringify(result) : (body as string);
  return { attributes };
}

/** The message of an error body (`{"error": {"message": ...}}`), else the text itself, cut short. */
function errorMessageOf(text: string): string {
  try {
    const message = fieldsOf(fieldsOf(JSON.parse(text)).error).message;
    if (typeof message === 'string') return message;
  } catch {
    // not JSON: the text is the message
  }
  return text.length > 500 ? `${text.slice(0, 500)}…` : text;
}

/**
 * Server-sent events in, the response they stream out: feed decoded text as it arrives, then
 * `result()` gives the body a non-streamed call would have answered (tool-call deltas merged,
 * token ids and logprobs concatenated, usage and finish reasons kept).
 */
export class StreamAssembler {
  private pending = '';
  private data: string[] = [];
  private readonly chunks: Accumulator;

  constructor(api: LlmApi) {
    this.chunks =
      api === 'responses'
        ? new ResponsesAccumulator()
        : api === 'text_completion'
          ? new CompletionAccumulator()
          : new ChatAccumulator();
  }

  feed(text: string): void {
    this.pending += text;
    for (let newline = this.pending.indexOf('\n'); newline >= 0; newline = this.pending.indexOf('\n')) {
      const line = this.pending.slice(0, newline).replace(/\r$/, '');
      this.pending = this.pending.slice(newline + 1);
      if (line === '') this.dispatch();
      else if (line.startsWith('data:')) this.data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    }
  }

  result(): unknown {
    this.dispatch();
    return this.chunks.result();
  }

  private dispatch(): void {
    if (this.data.length === 0) return;
    const payload = this.data.join('\n');
    this.data = [];
    if (payload === '[DONE]') return;
    try {
      this.chunks.add(fieldsOf(JSON.parse(payload)));
    } catch {
      // a chunk that is not JSON carries nothing to assemble
    }
  }
}

interface Accumulator {
  add(chunk: Fields): void;
  result(): unknown;
}

/** Concatenates token ids that vLLM sends per chunk, also under `provider_specific_fields`. */
function tokenIdsOf(choice: Fields): number[] | undefined {
  const ids = choice.token_ids ?? fieldsOf(choice.provider_specific_fields).token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

function promptIdsOf(value: Fields): number[] | undefined {
  const ids = value.prompt_token_ids ?? fieldsOf(value.provider_specific_fields).prompt_token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

/** Copies the fields of a chunk that are present (later chunks win). */
function keepPresent(target: Fields, chunk: Fields, keys: readonly string[]): void {
  for (const key of keys) {
    if (chunk[key] !== undefined && chunk[key] !== null) target[key] = chunk[key];
  }
}

/** The objects of a list in a chunk (`choices`, `tool_calls`); none when it is not a list. */
const objectsIn = (value: unknown): Fields[] => (Array.isArray(value) ? value.map(fieldsOf) : []);
const indexOf = (part: Fields, otherwise: number): number => (typeof part.index === 'number' ? part.index : otherwise);
const byIndex = <T extends { index: number }>(choices: Map<number, T>) =>
  [...choices.values()].sort((a, b) => a.index - b.index);

const MESSAGE_TEXTS = ['content', 'reasoning_content', 'reasoning', 'refusal'] as const;

interface ToolCall {
  id: string;
  type: string;
  function: { name: string; arguments: string };
}

interface ChatChoice {
  index: number;
  message: {
    role: string;
    content: string | null;
    reasoning_content?: string;
    reasoning?: string;
    refusal?: string;
    tool_calls?: ToolCall[];
  };
  finish_reason: unknown;
  logprobs?: { content: unknown[] };
  token_ids?: number[];
}

class ChatAccumulator implements Accumulator {
  private readonly head: Fields = {};
  private usage: unknown;
  private promptTokenIds: number[] | undefined;
  private readonly choices = new Map<number, ChatChoice>();

  add(chunk: Fields): void {
    keepPresent(this.head, chunk, ['id', 'created', 'model', 'system_fingerprint', 'service_tier']);
    if (chunk.usage) this.usage = chunk.usage;
    this.promptTokenIds ??= promptIdsOf(chunk);
    for (const delta of objectsIn(chunk.choices)) this.addChoice(delta);
  }

  private addChoice(chunk: Fields): void {
    const index = indexOf(chunk, 0);
    let choice = this.choices.get(index);
    if (!choice) {
      choice = { index, message: { role: 'assistant', content: null }, finish_reason: null };
      this.choices.set(index, choice);
    }
    const delta = fieldsOf(chunk.delta);
    const message = choice.message;
    if (typeof delta.role === 'string' && delta.role) message.role = delta.role;
    for (const field of MESSAGE_TEXTS) {
      const text = delta[field];
      if (typeof text === 'string') message[field] = (message[field] ?? '') + text;
    }
    for (const call of objectsIn(delta.tool_calls)) {
      message.tool_calls ??= [];
      mergeToolCall(message.tool_calls, call);
    }
    if (chunk.finish_reason) choice.finish_reason = chunk.finish_reason;
    const logprobs = fieldsOf(chunk.logprobs).content;
    if (Array.isArray(logprobs)) {
      choice.logprobs ??= { content: [] };
      choice.logprobs.content.push(...logprobs);
    }
    const ids = tokenIdsOf(chunk);
    if (ids) {
      choice.token_ids ??= [];
      choice.token_ids.push(...ids);
    }
    this.promptTokenIds ??= promptIdsOf(chunk);
  }

  result(): unknown {
    return {
      ...this.head,
      object: 'chat.completion',
      choices: byIndex(this.choices),
      ...(this.usage ? { usage: this.usage } : {}),
      ...(this.promptTokenIds ? { prompt_token_ids: this.promptTokenIds } : {}),
    };
  }
}

/** Adds a streamed tool-call delta to the call it continues (by index), or starts that call. */
function mergeToolCall(calls: ToolCall[], delta: Fields): void {
  const at = indexOf(delta, calls.length);
  calls[at] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
  const merged = calls[at];
  const { name, arguments: args } = fieldsOf(delta.function);
  if (typeof delta.id === 'string' && delta.id) merged.id = delta.id;
  if (typeof delta.type === 'string' && delta.type) merged.type = delta.type;
  if (typeof name === 'string') merged.function.name += name;
  if (typeof args === 'string') merged.function.arguments += args;
}

const COMPLETION_LOGPROBS = ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const;

interface CompletionChoice {
  index: number;
  text: string;
  finish_reason: unknown;
  token_ids?: number[];
  prompt_token_ids?: number[];
  logprobs?: Record<(typeof COMPLETION_LOGPROBS)[number], unknown[]>;
}

class CompletionAccumulator implements Accumulator {
  private readonly head: Fields = {};
  private usage: unknown;
  private readonly choices = new Map<number, CompletionChoice>();

  add(chunk: Fields): void {
    keepPresent(this.head, chunk, ['id', 'created', 'model', 'system_fingerprint']);
    if (chunk.usage) this.usage = chunk.usage;
    for (const part of objectsIn(chunk.choices)) this.addChoice(part);
  }

  private addChoice(part: Fields): void {
    const index = indexOf(part, 0);
    let choice = this.choices.get(index);
    if (!choice) {
      choice = { index, text: '', finish_reason: null };
      this.choices.set(index, choice);
    }
    if (typeof part.text === 'string') choice.text += part.text;
    if (part.finish_reason) choice.finish_reason = part.finish_reason;
    const ids = tokenIdsOf(part);
    if (ids) {
      choice.token_ids ??= [];
      choice.token_ids.push(...ids);
    }
    choice.prompt_token_ids ??= promptIdsOf(part);
    const logprobs = part.logprobs;
    if (isFields(logprobs)) {
      choice.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
      for (const key of COMPLETION_LOGPROBS) {
        const values = logprobs[key];
        if (Array.isArray(values)) choice.logprobs[key].push(...values);
      }
    }
  }

  result(): unknown {
    return {
      ...this.head,
      object: 'text_completion',
      choices: byIndex(this.choices),
      ...(this.usage ? { usage: this.usage } : {}),
    };
  }
}

/** The Responses API streams events; the final `response.*` event carries the whole response. */
class ResponsesAccumulator implements Accumulator {
  private response: unknown;

  add(event: Fields): void {
    if (isFields(event.response)) this.response = event.response;
  }

  result(): unknown {
    return this.response ?? {};
  }
}
