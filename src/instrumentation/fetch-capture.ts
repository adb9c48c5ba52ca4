import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { errorMessageOf, llmApiOf, requestAttributes, responseAttributes, StreamAssembler, type LlmApi } from './llm-exchange.js';
import { ATTR } from './semconv.js';

/**
 * LLM calls recorded at the HTTP boundary: the global `fetch` is wrapped before the app loads.
 * The `openai` package (v5 on), LangChain's ChatOpenAI and most LLM clients call it, so the exact
 * request and response bodies are seen whatever the client, its version or module system. A POST
 * to an OpenAI-style path gives an LLM span holding both bodies (streams assembled); any other
 * call gives a plain HTTP client span. Both carry `traceparent` to the server.
 */
export interface FetchCaptureOptions {
  readonly tracer: Tracer;
  /** Keep request and response bodies (messages, outputs, token ids) on LLM spans. */
  readonly captureContent: boolean;
  /** Ask vLLM-style servers for token ids (`return_token_ids: true`). */
  readonly returnTokenIds: boolean;
  /** The context an LLM span starts in when the active one is not the right parent. */
  readonly llmParent?: () => Context | undefined;
}

type Fetch = typeof globalThis.fetch;
type FetchInput = Parameters<Fetch>[0];

/** Wraps `globalThis.fetch`; returns the function that restores the original. */
export function installFetchCapture(options: FetchCaptureOptions): () => void {
  const original = globalThis.fetch;
  if (typeof original !== 'function') return () => {};
  const captured: Fetch = (input, init) => {
    if (isTracingSuppressed(context.active())) return original(input, init);
    let url: URL;
    let method: string;
    try {
      url = new URL(input instanceof Request ? input.url : String(input));
      method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    } catch {
      return original(input, init); // fetch itself reports the bad URL
    }
    const api = method === 'POST' ? llmApiOf(url.pathname) : undefined;
    return api ? llmCall(original, options, api, url, input, init) : httpCall(original, options.tracer, method, url, input, init);
  };
  globalThis.fetch = captured;
  return () => {
    if (globalThis.fetch === captured) globalThis.fetch = original;
  };
}

function urlAttributes(method: string, url: URL) {
  return {
    'http.request.method': method,
    'url.full': `${url.origin}${url.pathname}`,
    'server.address': url.hostname,
    'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
  };
}

/** The init to send: the caller's, with trace context added to its headers. */
function withTraceHeaders(ctx: Context, input: FetchInput, init: RequestInit | undefined, body?: string): RequestInit {
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  propagation.inject(ctx, headers, { set: (carrier, key, value) => carrier.set(key, value) });
  return body === undefined ? { ...init, headers } : { ...init, headers, body };
}

async function httpCall(original: Fetch, tracer: Tracer, method: string, url: URL, input: FetchInput, init?: RequestInit): Promise<Response> {
  const span = tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: urlAttributes(method, url) });
  const ctx = trace.setSpan(context.active(), span);
  try {
    const response = await context.with(ctx, () => original(input, withTraceHeaders(ctx, input, init)));
    span.setAttribute('http.response.status_code', response.status);
    if (response.status >= 400) span.setStatus({ code: SpanStatusCode.ERROR, message: `HTTP ${response.status}` });
    return response;
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

function failSpan(span: Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

async function requestText(input: FetchInput, init?: RequestInit): Promise<string | undefined> {
  const body = init?.body;
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array || body instanceof ArrayBuffer) return new TextDecoder().decode(body);
  if (body === undefined && input instanceof Request) return input.clone().text();
  return undefined; // a stream or form: not read, so the app's own body stays untouched
}

async function llmCall(original: Fetch, options: FetchCaptureOptions, api: LlmApi, url: URL, input: FetchInput, init?: RequestInit): Promise<Response> {
  let text = await requestText(input, init);
  let body: any;
  try {
    body = text === undefined ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  let sentBody: string | undefined;
  if (options.returnTokenIds && body && (api === 'chat' || api === 'text_completion') && body.return_token_ids === undefined) {
    body.return_token_ids = true;
    sentBody = text = JSON.stringify(body);
  }
  const operation = api === 'responses' ? 'chat' : api;
  const parent = options.llmParent?.() ?? context.active();
  const span = options.tracer.startSpan(typeof body?.model === 'string' ? `${operation} ${body.model}` : operation, {
    kind: SpanKind.CLIENT,
    attributes: {
      ...urlAttributes('POST', url),
      ...requestAttributes(api, body),
      'gen_ai.provider.name': url.hostname === 'api.openai.com' ? 'openai' : 'openai_compatible',
      [ATTR.llmApi]: api,
      [ATTR.llmStreamed]: body?.stream === true,
      ...(options.captureContent && text !== undefined ? { [ATTR.llmRequest]: text } : {}),
    },
  }, parent);
  const ctx = trace.setSpan(parent, span);
  let sendInput = input;
  let sendInit = withTraceHeaders(ctx, input, init, sentBody);
  if (sentBody !== undefined && input instanceof Request && init?.body === undefined) {
    sendInput = new Request(input, { body: sentBody });
    sendInit = withTraceHeaders(ctx, sendInput, init);
  }
  let response: Response;
  try {
    response = await context.with(ctx, () => original(sendInput, sendInit));
  } catch (error) {
    failSpan(span, error);
    span.end();
    throw error;
  }
  span.setAttribute('http.response.status_code', response.status);
  const copy = response.body ? response.clone() : undefined;
  recordResponse(span, api, response.status, response.headers.get('content-type') ?? '', copy, options.captureContent).catch(() => {});
  return response;
}

/** Reads the copy of the body while the app reads its own, then finishes the span. */
async function recordResponse(span: Span, api: LlmApi, status: number, contentType: string, copy: Response | undefined, captureContent: boolean): Promise<void> {
  const streamed = contentType.includes('text/event-stream');
  const assembler = streamed ? new StreamAssembler(api) : undefined;
  let text = '';
  let cut: unknown;
  if (copy?.body) {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of copy.body) {
        const piece = decoder.decode(chunk, { stream: true });
        if (assembler) assembler.feed(piece);
        else text += piece;
      }
      const rest = decoder.decode();
      if (assembler) assembler.feed(rest);
      else text += rest;
    } catch (error) {
      cut = error;
    }
  }
  try {
    if (status >= 400) {
      span.setAttribute('error.type', String(status));
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessageOf(text) });
      return;
    }
    let result: unknown;
    if (assembler) result = assembler.result();
    else {
      try {
        result = JSON.parse(text);
      } catch {
        result = undefined;
      }
    }
    if (result !== undefined) {
      span.setAttributes(responseAttributes(result));
      if (captureContent) span.setAttribute(ATTR.llmResponse, assembler ? JSON.stringify(result) : text);
    }
    if (cut !== undefined) {
      span.setAttribute('error.type', 'stream_cut');
      span.setStatus({ code: SpanStatusCode.ERROR, message: `the response ended early: ${cut instanceof Error ? cut.message : String(cut)}` });
    }
  } finally {
    span.end();
  }
}
