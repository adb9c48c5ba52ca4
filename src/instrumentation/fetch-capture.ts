import { subscribe } from 'node:diagnostics_channel';
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import { answerOutcome, llmApiOf, parsedUrl, requestAttributes, StreamAssembler, type LlmApi } from '../otlp/llm-exchange.js';
import { ATTR } from '../api/semconv.js';
import type { CallSpanStarter } from './call-span.js';

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
  /** Starts LLM spans without the tracer's span machinery (call-span.ts), where agl/register may. */
  readonly startLlmSpan?: CallSpanStarter;
}

type Fetch = typeof globalThis.fetch;
type FetchInput = Parameters<Fetch>[0];

export interface FetchCapture {
  /** LLM spans whose response has not been read to its end. */
  openCount(): number;
  /** Ends those spans with what is known (an exiting process sends them as they are). */
  endOpen(): void;
}

/** The enders of LLM spans still waiting for their response body. */
const openLlmSpans = new Set<() => void>();

/** The finishing of LLM spans whose answer is complete, deferred off the app's path (afterNextRequest). */
const answeredCalls = new Set<() => void>();

/** Finishes now the LLM spans whose answers are complete: a rollout's spans are sent when it ends. */
export function finishAnsweredCalls(): void {
  for (const finish of [...answeredCalls]) finish();
}

/** Wraps `globalThis.fetch`. */
export function installFetchCapture(options: FetchCaptureOptions): FetchCapture {
  const original = globalThis.fetch;
  const capture: FetchCapture = {
    openCount: () => openLlmSpans.size,
    endOpen: () => {
      finishAnsweredCalls();
      for (const end of [...openLlmSpans]) end();
    },
  };
  if (typeof original !== 'function') return capture;
  watchResponses();
  injectTraceContext();
  const captured: Fetch = (input, init) => {
    if (isTracingSuppressed(context.active())) return original(input, init);
    let url: URL;
    let method: string;
    try {
      url = parsedUrl(input instanceof Request ? input.url : String(input));
      method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    } catch {
      return original(input, init); // fetch itself reports the bad URL
    }
    const api = method === 'POST' ? llmApiOf(url.pathname) : undefined;
    return api ? llmCall(original, options, api, url, input, init) : httpCall(original, options.tracer, method, url, input, init);
  };
  globalThis.fetch = captured;
  return capture;
}

function urlAttributes(method: string, url: URL) {
  return {
    'http.request.method': method,
    'url.full': `${url.origin}${url.pathname}`,
    'server.address': url.hostname,
    'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
  };
}

/** What undici's `undici:request:create` channel hands over (Node's bundled undici publishes it for `fetch`). */
interface UndiciRequestCreated {
  readonly request: { readonly headers: string[] | string; addHeader(name: string, value: string): unknown };
}

/** The trace context of the captured call whose original `fetch` is running now. */
let sending: Context | undefined;

/**
 * Calls the original `fetch` so that the request it sends carries `ctx` (`traceparent`, and
 * whatever else the propagators write): undici creates the request synchronously inside
 * `fetch` (Node 22 and 24), and injectTraceContext adds the headers as it does. A redirect's
 * request, created later, goes without. Running `fetch` inside the call's context instead (so
 * that the channel would find it active) cost about 50 us of CPU a call, half of it in GC: every
 * step of undici's asynchronous work carried it.
 */
function sendWithTraceContext(original: Fetch, ctx: Context, input: FetchInput, init: RequestInit | undefined): Promise<Response> {
  sending = ctx;
  try {
    return original(input, init);
  } finally {
    sending = undefined;
  }
}

let injecting = false;

/**
 * Adds the trace context to the request being sent by sendWithTraceContext. Copying the app's
 * headers into a new Headers object instead cost about 30 us a call on the call's path (openai
 * sends a dozen headers, each validated again), and so did its garbage. A request that already
 * has a `traceparent` keeps the app's.
 */
function injectTraceContext(): void {
  if (injecting) return;
  injecting = true;
  subscribe('undici:request:create', (message) => {
    const ctx = sending;
    if (ctx === undefined) return;
    sending = undefined;
    const { request } = message as UndiciRequestCreated;
    if (hasTraceparent(request.headers)) return;
    propagation.inject(ctx, request, { set: (carrier, key, value) => void carrier.addHeader(key, value) });
  });
}

function hasTraceparent(headers: string[] | string): boolean {
  if (typeof headers === 'string') return /(^|\n)traceparent:/i.test(headers);
  for (let i = 0; i < headers.length; i += 2) if (headers[i].toLowerCase() === 'traceparent') return true;
  return false;
}

async function httpCall(original: Fetch, tracer: Tracer, method: string, url: URL, input: FetchInput, init?: RequestInit): Promise<Response> {
  const span = tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: urlAttributes(method, url) });
  try {
    const response = await sendWithTraceContext(original, trace.setSpan(context.active(), span), input, init);
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

function parsedJson(text: string | undefined): any {
  try {
    return text === undefined ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
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
  // The request is parsed after the call (its size is the conversation's), unless it must change.
  let body: any;
  let sentBody: string | undefined;
  if (options.returnTokenIds && (api === 'chat' || api === 'text_completion')) {
    body = parsedJson(text);
    if (body && body.return_token_ids === undefined) {
      body.return_token_ids = true;
      sentBody = text = JSON.stringify(body);
    }
  }
  const operation = api === 'responses' ? 'chat' : api;
  const parent = (api !== 'embeddings' ? options.llmParent?.() : undefined) ?? context.active();
  // The span starts bare: its attributes are set when it is finished, off the call's path.
  const span = options.startLlmSpan?.(operation, parent) ?? options.tracer.startSpan(operation, { kind: SpanKind.CLIENT }, parent);
  /** Names the span by its model and adds the request's attributes. */
  const describeRequest = () => {
    body ??= parsedJson(text);
    if (typeof body?.model === 'string') span.updateName(`${operation} ${body.model}`);
    span.setAttributes({
      ...urlAttributes('POST', url),
      'gen_ai.provider.name': url.hostname === 'api.openai.com' ? 'openai' : 'openai_compatible',
      [ATTR.llmApi]: api,
      ...(options.captureContent && text !== undefined ? { [ATTR.llmRequest]: text } : {}),
      ...requestAttributes(api, body),
      [ATTR.llmStreamed]: body?.stream === true,
    });
  };
  let sendInput = input;
  let sendInit = init;
  if (sentBody !== undefined) {
    if (input instanceof Request && init?.body === undefined) sendInput = new Request(input, { body: sentBody });
    else sendInit = { ...init, body: sentBody };
  }
  let response: Response;
  try {
    response = await sendWithTraceContext(original, trace.setSpan(parent, span), sendInput, sendInit);
  } catch (error) {
    describeRequest();
    failSpan(span, error);
    span.end();
    throw error;
  }
  // The closures below hold `status`, never `response`: a response dropped unread must stay collectable.
  const status = response.status;
  let finished = false;
  const endNow = (answer: string | unknown = '', streamed = false, failure?: unknown, endedAt?: number) => {
    if (finished) return;
    finished = true;
    openLlmSpans.delete(endNow);
    describeRequest();
    span.setAttribute('http.response.status_code', status);
    finishLlmSpan(span, status, answer, streamed, failure, options.captureContent, endedAt);
  };
  openLlmSpans.add(endNow);
  // Finished after the app has its answer and has sent its next request: parsing and recording
  // stay off its path. The span ends when the answer had fully arrived (rewards the app emits
  // right after come later), though it is finished later.
  const finish = (answer: string | unknown, streamed: boolean, failure: unknown, endedAt: number) => {
    const finishNow = () => {
      answeredCalls.delete(finishNow);
      endNow(answer, streamed, failure, endedAt);
    };
    answeredCalls.add(finishNow);
    afterNextRequest(finishNow);
  };
  if (!response.body) finish('', false, undefined, now());
  else if ((response.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const assembler = new StreamAssembler(api);
    readCopy(response.clone(), (text) => assembler.feed(text)).then(({ failure, endedAt }) => finish(assembler.result(), true, failure, endedAt), () => {});
  } else {
    observeBody(response, (text, failure) => finish(text, false, failure, now()), () => endNow());
  }
  return response;
}

const now = () => performance.timeOrigin + performance.now();

/**
 * Runs `work` in the check phase after next. An app that calls again at once sends that request
 * on the kept-alive connection from a setImmediate of undici's (it first checks that the server
 * has not closed the socket): work queued with one setImmediate of its own ran before that and
 * delayed the request (about 60 us of a 200 us overhead, measured in-process against the test
 * server). Queued from inside the check phase, it runs after the request is on the wire.
 */
function afterNextRequest(work: () => void): void {
  setImmediate(() => setImmediate(work));
}

/**
 * Reads a copy of a body to its end: resolves to the error that cut it short, if any, and the
 * time its last chunk arrived (the app got that chunk at the same moment).
 */
async function readCopy(copy: Response, onText: (text: string) => void): Promise<{ failure: unknown; endedAt: number }> {
  const decoder = new TextDecoder();
  let endedAt = now();
  try {
    for await (const chunk of copy.body!) {
      endedAt = now();
      onText(decoder.decode(chunk, { stream: true }));
    }
    onText(decoder.decode());
    return { failure: undefined, endedAt };
  } catch (error) {
    return { failure: error, endedAt };
  }
}

/** A JSON answer being watched: what to tell once the app has read it, and what ends its span if it never does. */
interface Watch {
  readonly done: (text: string, failure?: unknown) => void;
  readonly ifUnread: () => void;
}

const watched = new WeakMap<Response, Watch>();

/**
 * What ends the span of each watched answer the app has not begun to read, with when it came:
 * one still unread after UNREAD_MS was dropped.
 */
const unread = new Map<() => void, number>();
const UNREAD_MS = 60_000;

/** Ends the spans of the answers still unread UNREAD_MS before `now` (they were dropped). */
export function endUnreadAnswers(now = Date.now()): void {
  const cutoff = now - UNREAD_MS;
  for (const [end, since] of unread) {
    if (since >= cutoff) break; // in arrival order
    unread.delete(end);
    end();
  }
}

/**
 * A JSON answer is seen as the app reads it, without copying the stream (a copy, `clone()`,
 * costs more than the rest of the capture together): `text()`, `json()` and `arrayBuffer()` of
 * Response are wrapped once, for the process, and report what a watched response's reader got.
 * An app that reads `body` itself gets a copy made then. The span of an answer the app drops
 * unread ends a minute later (or at exit). Wrapping each response's own methods, and ending
 * dropped ones through a FinalizationRegistry, cost the app's GC: its p99 call grew by 1.5-2 ms
 * more than without them (same bench, 14 rounds).
 */
function observeBody(response: Response, done: (text: string, failure?: unknown) => void, ifUnread: () => void): void {
  unread.set(ifUnread, Date.now());
  watched.set(response, { done, ifUnread });
}

let watching = false;

/** Wraps Response's readers and starts the sweep of answers dropped unread; once per process. */
function watchResponses(): void {
  if (watching) return;
  watching = true;
  setInterval(endUnreadAnswers, UNREAD_MS / 4).unref();
  const prototype = Response.prototype;
  const { text, json, arrayBuffer } = prototype;
  const body = Object.getOwnPropertyDescriptor(prototype, 'body')!;
  /**
   * What to tell once `response` is read, taken as the app begins to read it (its body is read
   * once): from then on it is no longer unread, however long the reading takes.
   */
  const take = (response: Response) => {
    const watch = watched.get(response);
    if (!watch) return undefined;
    watched.delete(response);
    unread.delete(watch.ifUnread);
    return watch.done;
  };
  Object.defineProperties(prototype, {
    text: {
      ...Object.getOwnPropertyDescriptor(prototype, 'text'),
      value: async function (this: Response) {
        const settle = take(this);
        if (!settle) return text.call(this);
        try {
          const result = await text.call(this);
          settle(result);
          return result;
        } catch (error) {
          settle('', error);
          throw error;
        }
      },
    },
    json: {
      ...Object.getOwnPropertyDescriptor(prototype, 'json'),
      value: function (this: Response) {
        return watched.has(this) ? this.text().then((result) => JSON.parse(result)) : json.call(this);
      },
    },
    arrayBuffer: {
      ...Object.getOwnPropertyDescriptor(prototype, 'arrayBuffer'),
      value: async function (this: Response) {
        const settle = take(this);
        if (!settle) return arrayBuffer.call(this);
        const buffer = await arrayBuffer.call(this);
        settle(new TextDecoder().decode(buffer));
        return buffer;
      },
    },
    body: {
      ...body,
      get(this: Response) {
        // A body already used went through no reader of ours: the sweep ends its span.
        const settle = watched.has(this) && !this.bodyUsed ? take(this) : undefined;
        if (settle) {
          let copied = '';
          readCopy(prototype.clone.call(this), (piece) => (copied += piece)).then(({ failure }) => settle(copied, failure), () => {});
        }
        return body.get!.call(this);
      },
    },
  });
}

/** Finishes an LLM span from the response body: a JSON text, or a stream's assembled result. */
function finishLlmSpan(span: Span, status: number, body: string | unknown, streamed: boolean, failure: unknown, captureContent: boolean, endedAt?: number): void {
  try {
    const { attributes, error } = answerOutcome(status, body, streamed, captureContent);
    span.setAttributes(attributes);
    if (error) {
      span.setAttribute('error.type', error.type);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
    } else if (failure !== undefined) {
      span.setAttribute('error.type', 'stream_cut');
      span.setStatus({ code: SpanStatusCode.ERROR, message: `the response ended early: ${failure instanceof Error ? failure.message : String(failure)}` });
    }
  } finally {
    span.end(endedAt);
  }
}
