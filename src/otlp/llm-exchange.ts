/**
 * What an LLM API's HTTP exchange says about a call: which API a path is, and through that API's
 * codec (llm-codec.ts) the request's parameters and, from the response (a JSON body or SSE
 * events assembled into the same shape), id, model, finish reasons and usage. Used by the fetch
 * capture and the gateway alike.
 */
import type { Attributes } from '@opentelemetry/api';
import { ATTR } from '../api/semconv.js';
import { anthropicMessagesCodec } from './anthropic-messages.js';
import type { GenAiMessage, GenAiRequest } from './genai-documents.js';
import { fieldsOf } from './json-fields.js';
import type { LlmCodec, LlmFailure, StreamAccumulator } from './llm-codec.js';
import { chatCodec, completionsCodec, embeddingsCodec } from './openai-chat.js';
import { responsesCodec } from './openai-responses.js';

/** A stream's events assembled: the answer a plain call gives, and why it is not whole, if it is not. */
export interface AssembledStream {
  readonly answer: unknown;
  readonly failure?: LlmFailure;
}

export type LlmApi = 'chat' | 'text_completion' | 'responses' | 'embeddings' | 'messages';

const CODECS: Record<LlmApi, LlmCodec> = {
  chat: chatCodec,
  text_completion: completionsCodec,
  responses: responsesCodec,
  embeddings: embeddingsCodec,
  messages: anthropicMessagesCodec,
};

export const codecOf = (api: LlmApi): LlmCodec => CODECS[api];

// Anthropic's path is matched with its `/v1`: other APIs have `.../messages` resources (OpenAI's
// Assistants threads), and its `/v1/messages/count_tokens` is no call of a model.
const API_BY_PATH: [RegExp, LlmApi][] = [
  [/\/chat\/completions$/, 'chat'],
  [/\/completions$/, 'text_completion'],
  [/\/responses$/, 'responses'],
  [/\/embeddings$/, 'embeddings'],
  [/\/v1\/messages$/, 'messages'],
];

/** The LLM API a POST to `pathname` calls, or undefined when it is not one. */
export function llmApiOf(pathname: string): LlmApi | undefined {
  const path = pathname.endsWith('/') ? pathname.slice(0, -1) : pathname;
  return API_BY_PATH.find(([pattern]) => pattern.test(path))?.[1];
}

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

/** The request's attributes: the operation, then what the API's codec reads of the body. */
export function requestAttributes(api: LlmApi, body: unknown): Attributes {
  const codec = CODECS[api];
  return { 'gen_ai.operation.name': codec.operation, ...codec.requestAttributes(fieldsOf(body)) };
}

/**
 * What an LLM answer adds to its span: the response attributes and, with `content`, the body
 * itself (`agl.llm.response`: the JSON text as received, or the assembled stream); or, for an
 * error status or a stream that is no whole answer, the error to record (with what arrived).
 */
export function answerOutcome(
  api: LlmApi,
  status: number,
  body: string | AssembledStream | undefined,
  content: boolean,
): { attributes: Attributes; error?: LlmFailure } {
  if (status >= 400)
    return {
      attributes: {},
      error: {
        message: errorMessageOf(typeof body === 'string' ? body : '') || `HTTP ${status}`,
        type: String(status),
      },
    };
  if (body === undefined) return { attributes: {} };
  const result = answerOf(body);
  if (result === undefined) return { attributes: {} };
  const attributes = CODECS[api].responseAttributes(fieldsOf(result));
  if (content) attributes[ATTR.llmResponse] = typeof body === 'string' ? body : JSON.stringify(result);
  return typeof body === 'string' || !body.failure ? { attributes } : { attributes, error: body.failure };
}

/**
 * The call as GenAI documents: the request's messages, system instructions and tools, and the
 * answer's output messages (a JSON text, or a stream's assembled answer); none that the API
 * has not (embeddings) or that do not parse.
 */
export function genAiDocuments(
  api: LlmApi,
  request: unknown,
  answer: string | AssembledStream | undefined,
): { request?: GenAiRequest; output?: GenAiMessage[] } {
  const codec = CODECS[api];
  const result = answerOf(answer);
  return {
    request: request === undefined ? undefined : codec.genAiRequest?.(fieldsOf(request)),
    output: result === undefined ? undefined : codec.genAiResponse?.(fieldsOf(result)),
  };
}

/** The answer a body holds: its JSON parsed, or a stream's assembled answer; none when it does not parse. */
function answerOf(body: string | AssembledStream | undefined): unknown {
  if (typeof body !== 'string') return body?.answer;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
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
 * `result()` gives the body a non-streamed call would have answered, as the API's codec
 * assembles it.
 */
export class StreamAssembler {
  private pending = '';
  private data: string[] = [];
  private readonly chunks: StreamAccumulator;

  constructor(api: LlmApi) {
    this.chunks = CODECS[api].streamAccumulator();
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

  result(): AssembledStream {
    this.dispatch();
    return { answer: this.chunks.result(), failure: this.chunks.failure?.() };
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
