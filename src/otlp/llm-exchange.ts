import type { Attributes } from '@opentelemetry/api';
import { ATTR } from '../api/semconv.js';

/**
 * What an OpenAI-style HTTP exchange says about an LLM call: which API it used, the request's
 * sampling parameters, and, from the response (a JSON body or SSE chunks assembled into the same
 * shape), id, model, finish reasons and usage. Used by the fetch capture and the gateway alike.
 */
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

export function requestAttributes(api: LlmApi, body: any): Attributes {
  const attributes: Attributes = { 'gen_ai.operation.name': api === 'responses' ? 'chat' : api };
  if (typeof body?.model === 'string') attributes['gen_ai.request.model'] = body.model;
  for (const [field, key] of REQUEST_PARAMETERS) {
    if (typeof body?.[field] === 'number') attributes[key] = body[field];
  }
  if (typeof body?.stop === 'string') attributes['gen_ai.request.stop_sequences'] = [body.stop];
  else if (Array.isArray(body?.stop)) attributes['gen_ai.request.stop_sequences'] = body.stop.filter((s: unknown) => typeof s === 'string');
  return attributes;
}

export function responseAttributes(response: any): Attributes {
  const attributes: Attributes = {};
  if (typeof response?.id === 'string') attributes['gen_ai.response.id'] = response.id;
  if (typeof response?.model === 'string') attributes['gen_ai.response.model'] = response.model;
  const reasons = Array.isArray(response?.choices)
    ? response.choices.map((c: any) => c?.finish_reason).filter((r: unknown) => typeof r === 'string')
    : typeof response?.status === 'string' ? [response.status] : [];
  if (reasons.length > 0) attributes['gen_ai.response.finish_reasons'] = reasons;
  const usage = response?.usage;
  const input = usage?.prompt_tokens ?? usage?.input_tokens;
  const output = usage?.completion_tokens ?? usage?.output_tokens;
  if (typeof input === 'number') attributes['gen_ai.usage.input_tokens'] = input;
  if (typeof output === 'number') attributes['gen_ai.usage.output_tokens'] = output;
  return attributes;
}

/**
 * What an LLM answer adds to its span: the response attributes and, with `content`, the body
 * itself (`agl.llm.response`: the JSON text as received, or the assembled stream); or, for an
 * error status, the error to record.
 */
export function answerOutcome(status: number, body: string | unknown, streamed: boolean, content: boolean): { attributes: Attributes; error?: { message: string; type: string } } {
  if (status >= 400) return { attributes: {}, error: { message: errorMessageOf(typeof body === 'string' ? body : '') || `HTTP ${status}`, type: String(status) } };
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
export function errorMessageOf(text: string): string {
  try {
    const message = JSON.parse(text)?.error?.message;
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
    this.chunks = api === 'responses' ? new ResponsesAccumulator() : api === 'text_completion' ? new CompletionAccumulator() : new ChatAccumulator();
  }

  feed(text: string): void {
    this.pending += text;
    let newline: number;
    while ((newline = this.pending.indexOf('\n')) >= 0) {
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
      this.chunks.add(JSON.parse(payload));
    } catch {
      // a chunk that is not JSON carries nothing to assemble
    }
  }
}

interface Accumulator {
  add(chunk: any): void;
  result(): unknown;
}

/** Concatenates token ids that vLLM sends per chunk, also under `provider_specific_fields`. */
function tokenIdsOf(choice: any): number[] | undefined {
  const ids = choice?.token_ids ?? choice?.provider_specific_fields?.token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

function promptIdsOf(value: any): number[] | undefined {
  const ids = value?.prompt_token_ids ?? value?.provider_specific_fields?.prompt_token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

/** Copies the fields of a chunk that are present (later chunks win). */
function keepPresent(target: Record<string, unknown>, chunk: any, keys: readonly string[]): void {
  for (const key of keys) {
    if (chunk[key] !== undefined && chunk[key] !== null) target[key] = chunk[key];
  }
}

const byIndex = (choices: Map<number, any>) => [...choices.values()].sort((a, b) => a.index - b.index);

class ChatAccumulator implements Accumulator {
  private head: any = {};
  private usage: unknown;
  private promptTokenIds: number[] | undefined;
  private readonly choices = new Map<number, any>();

  add(chunk: any): void {
    keepPresent(this.head, chunk, ['id', 'created', 'model', 'system_fingerprint', 'service_tier']);
    if (chunk.usage) this.usage = chunk.usage;
    this.promptTokenIds ??= promptIdsOf(chunk);
    for (const delta of chunk.choices ?? []) this.addChoice(delta);
  }

  private addChoice(chunk: any): void {
    const index = chunk.index ?? 0;
    let choice = this.choices.get(index);
    if (!choice) {
      choice = { index, message: { role: 'assistant', content: null }, finish_reason: null };
      this.choices.set(index, choice);
    }
    const delta = chunk.delta ?? {};
    const message = choice.message;
    if (delta.role) message.role = delta.role;
    for (const field of ['content', 'reasoning_content', 'reasoning', 'refusal']) {
      if (typeof delta[field] === 'string') message[field] = (message[field] ?? '') + delta[field];
    }
    for (const call of delta.tool_calls ?? []) {
      message.tool_calls ??= [];
      const at = call.index ?? message.tool_calls.length;
      const merged = (message.tool_calls[at] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (call.id) merged.id = call.id;
      if (call.type) merged.type = call.type;
      if (call.function?.name) merged.function.name += call.function.name;
      if (call.function?.arguments) merged.function.arguments += call.function.arguments;
    }
    if (chunk.finish_reason) choice.finish_reason = chunk.finish_reason;
    if (Array.isArray(chunk.logprobs?.content)) (choice.logprobs ??= { content: [] }).content.push(...chunk.logprobs.content);
    const ids = tokenIdsOf(chunk);
    if (ids) (choice.token_ids ??= []).push(...ids);
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

class CompletionAccumulator implements Accumulator {
  private head: any = {};
  private usage: unknown;
  private readonly choices = new Map<number, any>();

  add(chunk: any): void {
    keepPresent(this.head, chunk, ['id', 'created', 'model', 'system_fingerprint']);
    if (chunk.usage) this.usage = chunk.usage;
    for (const part of chunk.choices ?? []) {
      const index = part.index ?? 0;
      let choice = this.choices.get(index);
      if (!choice) this.choices.set(index, (choice = { index, text: '', finish_reason: null }));
      if (typeof part.text === 'string') choice.text += part.text;
      if (part.finish_reason) choice.finish_reason = part.finish_reason;
      const ids = tokenIdsOf(part);
      if (ids) (choice.token_ids ??= []).push(...ids);
      choice.prompt_token_ids ??= promptIdsOf(part);
      const logprobs = part.logprobs;
      if (logprobs && typeof logprobs === 'object') {
        choice.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
        for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) {
          if (Array.isArray(logprobs[key])) choice.logprobs[key].push(...logprobs[key]);
        }
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

  add(event: any): void {
    if (event?.response && typeof event.response === 'object') this.response = event.response;
  }

  result(): unknown {
    return this.response ?? {};
  }
}
