/**
 * OpenAI's chat completions, completions and embeddings APIs (and every server that speaks them:
 * vLLM, SGLang, LiteLLM, Ollama ...): sampling parameters, answer summary, and the chunks of a
 * stream merged into the answer a plain call gives (tool-call deltas merged, vLLM's token ids
 * and logprobs concatenated, usage and finish reasons kept).
 */
import type { Attributes } from '@opentelemetry/api';
import { fieldsOf, isFields, keepPresent, objectsIn, type Fields } from './json-fields.js';
import type { LlmCodec, StreamAccumulator } from './llm-codec.js';
import {
  chatGenAiRequest,
  chatGenAiResponse,
  completionGenAiRequest,
  completionGenAiResponse,
} from './openai-genai.js';

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

/** The model and sampling parameters of an OpenAI-style request (the Responses API's too). */
export function openAIRequestAttributes(request: Fields): Attributes {
  const attributes: Attributes = {};
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

/** Id, model, finish reasons (or the Responses API's status) and usage of an OpenAI-style answer. */
export function openAIResponseAttributes(response: Fields): Attributes {
  const attributes: Attributes = {};
  const { id, model, choices, status, usage } = response;
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

/** `openai` for OpenAI's own service, `openai_compatible` for every other server of its APIs. */
export const openAIProvider = (host: string) => (host === 'api.openai.com' ? 'openai' : 'openai_compatible');

const openAICodec = (
  api: string,
  streamAccumulator: () => StreamAccumulator,
  genAi: Pick<LlmCodec, 'genAiRequest' | 'genAiResponse'> = {},
): LlmCodec => ({
  api,
  operation: api,
  provider: openAIProvider,
  requestAttributes: openAIRequestAttributes,
  responseAttributes: openAIResponseAttributes,
  streamAccumulator,
  ...genAi,
});

export const chatCodec = openAICodec('chat', () => new ChatAccumulator(), {
  genAiRequest: chatGenAiRequest,
  genAiResponse: chatGenAiResponse,
});
export const completionsCodec = openAICodec('text_completion', () => new CompletionAccumulator(), {
  genAiRequest: completionGenAiRequest,
  genAiResponse: completionGenAiResponse,
});
/** Embeddings are never streamed; a stream would be kept as chunks of chat. */
export const embeddingsCodec = openAICodec('embeddings', () => new ChatAccumulator());

/** Concatenates token ids that vLLM sends per chunk, also under `provider_specific_fields`. */
function tokenIdsOf(choice: Fields): number[] | undefined {
  const ids = choice.token_ids ?? fieldsOf(choice.provider_specific_fields).token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

function promptIdsOf(value: Fields): number[] | undefined {
  const ids = value.prompt_token_ids ?? fieldsOf(value.provider_specific_fields).prompt_token_ids;
  return Array.isArray(ids) ? ids : undefined;
}

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

class ChatAccumulator implements StreamAccumulator {
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

class CompletionAccumulator implements StreamAccumulator {
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
