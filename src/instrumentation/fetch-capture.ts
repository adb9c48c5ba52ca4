import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  context,
  logs,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type LogRecord,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { isTracingSuppressed } from '@opentelemetry/core';
import {
  answerOutcome,
  codecOf,
  genAiDocuments,
  llmApiOf,
  parsedUrl,
  requestAttributes,
  StreamAssembler,
  type AssembledStream,
  type LlmApi,
} from '../otlp/llm-exchange.js';
import { ATTR, GENAI } from '../api/semconv.js';
import { genAiAttributes, genAiEventAttributes, type GenAiRecording } from '../otlp/genai-documents.js';
import type { CallSpanStarter } from './call-span.js';

/**
 * LLM calls recorded at the HTTP boundary: the global `fetch` is wrapped before the app loads.
 * The `openai` package (v5 on), LangChain's ChatOpenAI and most LLM clients call it, so the exact
 * request and response bodies are seen whatever the client, its version or module system. A POST
 * to an OpenAI-style path gives an LLM span holding both bodies (streams assembled); any other
 * call gives a plain HTTP client span. Both carry `traceparent` to the server.
 */
interface FetchCaptureOptions {
  readonly tracer: Tracer;
  /** Keep request and response bodies (messages, outputs, token ids) on LLM spans. */
  readonly captureContent: boolean;
  /** Ask vLLM-style servers for token ids (`return_token_ids: true`). */
  readonly returnTokenIds: boolean;
  /** The context an LLM span starts in when the active one is not the right parent. */
  readonly llmParent?: () => Context | undefined;
  /** Starts LLM spans without the tracer's span machinery (call-span.ts), where agl/register may. */
  readonly startLlmSpan?: CallSpanStarter;
  /** The GenAI documents to record besides the exchange, for other backends (with captureContent). */
  readonly genAi?: GenAiRecording;
}

type Fetch = typeof globalThis.fetch;
type FetchInput = Parameters<Fetch>[0];

/** A request's JSON body, where it is an object. */
type RequestBody = Record<string, unknown>;

/** Undici's channel of created requests (Node's bundled undici publishes it for `fetch`). */
const REQUEST_CREATED = 'undici:request:create';

/** What REQUEST_CREATED hands over. */
interface UndiciRequestCreated {
  readonly request: { readonly headers: string[] | string; addHeader(name: string, value: string): unknown };
}

/** The readers of Response that see a watched answer as the app reads it (FetchCapture.observeBody). */
const READERS = ['text', 'json', 'arrayBuffer', 'body'] as const;
type Readers = Record<(typeof READERS)[number], PropertyDescriptor>;

/** A watched answer still unread this long after it came was dropped: its span ends. */
const UNREAD_MS = 60_000;

/** What enable() changed, kept so that disable() puts each thing back as it was. */
interface Patches {
  /** globalThis's own `fetch` property before, and with, the capture's. */
  readonly fetchBefore: PropertyDescriptor | undefined;
  readonly fetchOurs: PropertyDescriptor | undefined;
  /** Response.prototype's readers before, and the capture's. */
  readonly readersBefore: Readers;
  readonly readersOurs: Readers;
  /** The sweep of answers dropped unread. */
  readonly sweep: NodeJS.Timeout;
}

/**
 * The fetch capture of a process, switched on by enable() and off by disable(), which puts
 * `globalThis.fetch` and Response's readers back as they were, unsubscribes from undici's channel
 * and stops the sweep. All its state is its own: each LLM call's in LlmCall objects, the
 * answers being watched in a WeakMap by their response.
 */
export class FetchCapture {
  /** The LLM calls whose span waits for its response body. */
  private readonly open = new Set<LlmCall>();
  /** The finishing of LLM spans whose answer is complete, deferred off the app's path (afterNextRequest). */
  private readonly answeredCalls = new Set<() => void>();
  /** The JSON answers being watched, and the call whose span waits for each. */
  private watched = new WeakMap<Response, LlmCall>();
  /** The calls whose JSON answer the app has not begun to read, with when it came (in that order). */
  private readonly unread = new Map<LlmCall, number>();
  /** The trace context of the captured call whose original `fetch` is running now. */
  private sending: Context | undefined;
  private patches: Patches | undefined;

  constructor(private readonly options: FetchCaptureOptions) {}

  /** Wraps `globalThis.fetch` and Response's readers, and listens to undici's requests (once, however often called). */
  enable(): void {
    const original = globalThis.fetch;
    if (this.patches || typeof original !== 'function') return;
    const fetchBefore = Object.getOwnPropertyDescriptor(globalThis, 'fetch');
    const readersBefore = ownReaders(Response.prototype);
    const readersOurs = this.readers(readersBefore);
    Object.defineProperties(Response.prototype, readersOurs);
    subscribe(REQUEST_CREATED, this.onRequestCreated);
    globalThis.fetch = this.captured(original);
    const sweep = setInterval(() => this.endUnreadAnswers(), UNREAD_MS / 4).unref();
    this.patches = {
      fetchBefore,
      fetchOurs: Object.getOwnPropertyDescriptor(globalThis, 'fetch'),
      readersBefore,
      readersOurs,
      sweep,
    };
  }

  /**
   * Ends the spans still open with what is known (nothing would end them later), then undoes
   * enable(): what it replaced is put back, unless something replaced the capture's since (the
   * capture's then passes each call through).
   */
  disable(): void {
    const patches = this.patches;
    if (!patches) return;
    this.patches = undefined;
    this.endOpen();
    clearInterval(patches.sweep);
    unsubscribe(REQUEST_CREATED, this.onRequestCreated);
    this.sending = undefined;
    restore(globalThis, 'fetch', patches.fetchOurs, patches.fetchBefore);
    for (const name of READERS)
      restore(Response.prototype, name, patches.readersOurs[name], patches.readersBefore[name]);
    this.watched = new WeakMap();
    this.unread.clear();
  }

  /** LLM spans whose response has not been read to its end. */
  openCount(): number {
    return this.open.size;
  }

  /** Ends those spans with what is known (an exiting process sends them as they are). */
  endOpen(): void {
    this.finishAnsweredCalls();
    for (const call of [...this.open]) this.endCall(call);
  }

  /** Finishes now the LLM spans whose answers are complete: a rollout's spans are sent when it ends. */
  finishAnsweredCalls(): void {
    for (const finish of [...this.answeredCalls]) finish();
  }

  /** Ends the spans of the answers still unread UNREAD_MS before `now` (they were dropped). */
  endUnreadAnswers(now = Date.now()): void {
    const cutoff = now - UNREAD_MS;
    for (const [call, since] of this.unread) {
      if (since >= cutoff) break; // in arrival order
      this.unread.delete(call);
      this.endCall(call);
    }
  }

  /** The `fetch` that records: each call to it while the capture is enabled gets a span. */
  private captured(original: Fetch): Fetch {
    return (input, init) => {
      if (!this.patches || isTracingSuppressed(context.active())) return original(input, init);
      let url: URL;
      let method: string;
      try {
        url = parsedUrl(input instanceof Request ? input.url : String(input));
        method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
      } catch {
        return original(input, init); // fetch itself reports the bad URL
      }
      const api = method === 'POST' ? llmApiOf(url.pathname) : undefined;
      return api ? this.llmCall(original, api, url, input, init) : this.httpCall(original, method, url, input, init);
    };
  }

  /**
   * Calls the original `fetch` so that the request it sends carries `ctx` (`traceparent`, and
   * whatever else the propagators write): undici creates the request synchronously inside
   * `fetch` (Node 22 and 24), and onRequestCreated adds the headers as it does. A redirect's
   * request, created later, goes without. Running `fetch` inside the call's context instead (so
   * that the channel would find it active) cost about 50 us of CPU a call, half of it in GC: every
   * step of undici's asynchronous work carried it.
   */
  private send(original: Fetch, ctx: Context, input: FetchInput, init: RequestInit | undefined): Promise<Response> {
    this.sending = ctx;
    try {
      return original(input, init);
    } finally {
      this.sending = undefined;
    }
  }

  /**
   * Adds the trace context to the request being sent by send(). Copying the app's headers into a
   * new Headers object instead cost about 30 us a call on the call's path (openai sends a dozen
   * headers, each validated again), and so did its garbage. A request that already has a
   * `traceparent` keeps the app's.
   */
  private readonly onRequestCreated = (message: unknown): void => {
    const ctx = this.sending;
    if (ctx === undefined) return;
    this.sending = undefined;
    const { request } = message as UndiciRequestCreated;
    if (hasTraceparent(request.headers)) return;
    propagation.inject(ctx, request, { set: (carrier, key, value) => void carrier.addHeader(key, value) });
  };

  private async httpCall(
    original: Fetch,
    method: string,
    url: URL,
    input: FetchInput,
    init?: RequestInit,
  ): Promise<Response> {
    const span = this.options.tracer.startSpan(method, {
      kind: SpanKind.CLIENT,
      attributes: urlAttributes(method, url),
    });
    try {
      const response = await this.send(original, trace.setSpan(context.active(), span), input, init);
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

  private async llmCall(
    original: Fetch,
    api: LlmApi,
    url: URL,
    input: FetchInput,
    init?: RequestInit,
  ): Promise<Response> {
    const { options } = this;
    const request = await outgoingRequest(api, options.returnTokenIds, input, init);
    const operation = codecOf(api).operation;
    const parent = (api !== 'embeddings' ? options.llmParent?.() : undefined) ?? context.active();
    // The span starts bare: its attributes are set when it is finished, off the call's path.
    const span =
      options.startLlmSpan?.(operation, parent) ??
      options.tracer.startSpan(operation, { kind: SpanKind.CLIENT }, parent);
    const call = new LlmCall(span, operation, api, url, request.text, request.body, options);
    let response: Response;
    try {
      response = await this.send(original, trace.setSpan(parent, span), request.input, request.init);
    } catch (error) {
      call.fail(error);
      throw error;
    }
    call.status = response.status;
    this.open.add(call);
    this.watchAnswer(call, api, response);
    return response;
  }

  /** Finishes the call's span once its answer is complete: a stream read from a copy, a JSON answer as the app reads it. */
  private watchAnswer(call: LlmCall, api: LlmApi, response: Response): void {
    if (!response.body) this.answered(call, '', undefined, now());
    else if ((response.headers.get('content-type') ?? '').includes('text/event-stream')) {
      const assembler = new StreamAssembler(api);
      readCopy(response.clone(), (text) => assembler.feed(text)).then(
        ({ failure, endedAt }) => this.answered(call, assembler.result(), failure, endedAt),
        () => {},
      );
    } else {
      this.observeBody(response, call);
    }
  }

  /**
   * Finishes the call's span after the app has its answer and has sent its next request: parsing
   * and recording stay off its path. The span ends when the answer had fully arrived (rewards the
   * app emits right after come later), though it is finished later.
   */
  private answered(call: LlmCall, answer: string | AssembledStream, failure: unknown, endedAt: number): void {
    const finish = () => {
      this.answeredCalls.delete(finish);
      this.endCall(call, answer, failure, endedAt);
    };
    this.answeredCalls.add(finish);
    afterNextRequest(finish);
  }

  private endCall(call: LlmCall, answer?: string | AssembledStream, failure?: unknown, endedAt?: number): void {
    this.open.delete(call);
    call.end(answer, failure, endedAt);
  }

  /**
   * A JSON answer is seen as the app reads it, without copying the stream (a copy, `clone()`,
   * costs more than the rest of the capture together): `text()`, `json()` and `arrayBuffer()` of
   * Response are wrapped once, by enable(), and report what a watched response's reader got.
   * An app that reads `body` itself gets a copy made then. The span of an answer the app drops
   * unread ends a minute later (or at exit). Wrapping each response's own methods, and ending
   * dropped ones through a FinalizationRegistry, cost the app's GC: its p99 call grew by 1.5-2 ms
   * more than without them (same bench, 14 rounds).
   */
  private observeBody(response: Response, call: LlmCall): void {
    this.unread.set(call, Date.now());
    this.watched.set(response, call);
  }

  /**
   * The call waiting for `response`, taken as the app begins to read it (its body is read once):
   * from then on it is no longer unread, however long the reading takes.
   */
  private take(response: Response): LlmCall | undefined {
    const call = this.watched.get(response);
    if (!call) return undefined;
    this.watched.delete(response);
    this.unread.delete(call);
    return call;
  }

  /** Response's readers as enable() sets them: each tells the capture what the app read of a watched answer. */
  private readers(before: Readers): Readers {
    const capture = this;
    const text: () => Promise<string> = before.text.value;
    const json: () => Promise<unknown> = before.json.value;
    const arrayBuffer: () => Promise<ArrayBuffer> = before.arrayBuffer.value;
    const body = before.body.get as () => ReadableStream<Uint8Array> | null;
    const clone: () => Response = Response.prototype.clone;
    return {
      text: {
        ...before.text,
        value: async function (this: Response) {
          const call = capture.take(this);
          if (!call) return text.call(this);
          try {
            const result = await text.call(this);
            capture.answered(call, result, undefined, now());
            return result;
          } catch (error) {
            capture.answered(call, '', error, now());
            throw error;
          }
        },
      },
      json: {
        ...before.json,
        value: function (this: Response) {
          return capture.watched.has(this) ? this.text().then((result) => JSON.parse(result)) : json.call(this);
        },
      },
      arrayBuffer: {
        ...before.arrayBuffer,
        value: async function (this: Response) {
          const call = capture.take(this);
          if (!call) return arrayBuffer.call(this);
          const buffer = await arrayBuffer.call(this);
          capture.answered(call, new TextDecoder().decode(buffer), undefined, now());
          return buffer;
        },
      },
      body: {
        ...before.body,
        get(this: Response) {
          // A body already used went through no reader of ours: the sweep ends its span.
          const call = capture.watched.has(this) && !this.bodyUsed ? capture.take(this) : undefined;
          if (call) {
            let copied = '';
            readCopy(clone.call(this), (piece) => (copied += piece)).then(
              ({ failure }) => capture.answered(call, copied, failure, now()),
              () => {},
            );
          }
          return body.call(this);
        },
      },
    };
  }
}

/**
 * One LLM call's span, from its request to its end. It holds the answer's status, never the
 * response: a response dropped unread must stay collectable.
 */
class LlmCall {
  status = 0;
  private ended = false;

  constructor(
    private readonly span: Span,
    private readonly operation: string,
    private readonly api: LlmApi,
    private readonly url: URL,
    private readonly text: string | undefined,
    /** The request parsed, once needed: after the call (its size is the conversation's), unless it had to change. */
    private body: RequestBody | undefined,
    private readonly options: Pick<FetchCaptureOptions, 'captureContent' | 'genAi'>,
  ) {}

  /** The request failed: the span ends with its error. */
  fail(error: unknown): void {
    this.describeRequest();
    failSpan(this.span, error);
    this.span.end();
  }

  /** Ends the span (once) with the answer: a JSON text or a stream's assembled result; none when it was never read. */
  end(answer: string | AssembledStream = '', failure?: unknown, endedAt?: number): void {
    if (this.ended) return;
    this.ended = true;
    this.describeRequest();
    this.span.setAttribute('http.response.status_code', this.status);
    if (this.options.captureContent && this.status < 400) this.recordGenAi(answer);
    finishLlmSpan(this.span, this.api, this.status, answer, failure, this.options.captureContent, endedAt);
  }

  /** The call's GenAI documents on the span and as an operation.details log record, as asked. */
  private recordGenAi(answer: string | AssembledStream): void {
    const { span: onSpan = false, event = false } = this.options.genAi ?? {};
    if (!onSpan && !event) return;
    const { request, output } = genAiDocuments(this.api, this.body, answer);
    if (onSpan) this.span.setAttributes(genAiAttributes(request, output) as Attributes);
    if (event)
      logs.getLogger('agl').emit({
        eventName: GENAI.operationDetails,
        context: trace.setSpan(ROOT_CONTEXT, this.span),
        attributes: {
          'gen_ai.operation.name': this.operation,
          'gen_ai.provider.name': codecOf(this.api).provider(this.url.hostname),
          ...genAiEventAttributes(request, output),
        } as LogRecord['attributes'],
      });
  }

  /** Names the span by its model and adds the request's attributes. */
  private describeRequest(): void {
    const { span, url, api, text } = this;
    this.body ??= parsedRequest(text);
    const body = this.body;
    if (typeof body?.model === 'string') span.updateName(`${this.operation} ${body.model}`);
    span.setAttributes({
      ...urlAttributes('POST', url),
      'gen_ai.provider.name': codecOf(api).provider(url.hostname),
      ...(this.options.genAi?.olderSystem ? { 'gen_ai.system': codecOf(api).provider(url.hostname) } : {}),
      [ATTR.llmApi]: api,
      ...(this.options.captureContent && text !== undefined ? { [ATTR.llmRequest]: text } : {}),
      ...requestAttributes(api, body),
      [ATTR.llmStreamed]: body?.stream === true,
    });
  }
}

/** What an LLM call sends: the app's request as it is, or a copy that asks for token ids. */
interface OutgoingRequest {
  readonly text: string | undefined;
  readonly body: RequestBody | undefined;
  readonly input: FetchInput;
  readonly init: RequestInit | undefined;
}

/** The request is parsed here only where it must change: to ask for token ids. */
async function outgoingRequest(
  api: LlmApi,
  returnTokenIds: boolean,
  input: FetchInput,
  init: RequestInit | undefined,
): Promise<OutgoingRequest> {
  const text = await requestText(input, init);
  if (!returnTokenIds || (api !== 'chat' && api !== 'text_completion')) return { text, body: undefined, input, init };
  const body = parsedRequest(text);
  if (!body || body.return_token_ids !== undefined) return { text, body, input, init };
  body.return_token_ids = true;
  const sent = JSON.stringify(body);
  if (input instanceof Request && init?.body === undefined)
    return { text: sent, body, input: new Request(input, { body: sent }), init };
  return { text: sent, body, input, init: { ...init, body: sent } };
}

async function requestText(input: FetchInput, init?: RequestInit): Promise<string | undefined> {
  const body = init?.body;
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array || body instanceof ArrayBuffer) return new TextDecoder().decode(body);
  if (body === undefined && input instanceof Request) return input.clone().text();
  return undefined; // a stream or form: not read, so the app's own body stays untouched
}

function parsedRequest(text: string | undefined): RequestBody | undefined {
  try {
    const value: unknown = text === undefined ? undefined : JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as RequestBody) : undefined;
  } catch {
    return undefined;
  }
}

function urlAttributes(method: string, url: URL) {
  return {
    'http.request.method': method,
    'url.full': `${url.origin}${url.pathname}`,
    'server.address': url.hostname,
    'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
  };
}

function hasTraceparent(headers: string[] | string): boolean {
  if (typeof headers === 'string') return /(^|\n)traceparent:/i.test(headers);
  for (let i = 0; i < headers.length; i += 2) if (headers[i].toLowerCase() === 'traceparent') return true;
  return false;
}

function failSpan(span: Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

/**
 * When an answer's last byte came: a `performance.now()` reading, which the LLM span (ours, or
 * the SDK's) places on its own clock, so that the end never comes before the start.
 */
const now = () => performance.now();

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
async function readCopy(
  copy: Response,
  onText: (text: string) => void,
): Promise<{ failure: unknown; endedAt: number }> {
  const decoder = new TextDecoder();
  let endedAt = now();
  try {
    for await (const chunk of copy.body ?? []) {
      endedAt = now();
      onText(decoder.decode(chunk, { stream: true }));
    }
    onText(decoder.decode());
    return { failure: undefined, endedAt };
  } catch (error) {
    return { failure: error, endedAt };
  }
}

function ownReaders(prototype: object): Readers {
  const readers: Partial<Readers> = {};
  for (const name of READERS) {
    const descriptor = Object.getOwnPropertyDescriptor(prototype, name);
    if (!descriptor) throw new TypeError(`Response.prototype has no ${name}`);
    readers[name] = descriptor;
  }
  return readers as Readers;
}

/** Puts `name` of `target` back as it was, unless something replaced the capture's since. */
function restore(
  target: object,
  name: string,
  ours: PropertyDescriptor | undefined,
  before: PropertyDescriptor | undefined,
): void {
  const current = Object.getOwnPropertyDescriptor(target, name);
  if (current?.value !== ours?.value || current?.get !== ours?.get) return;
  if (before) Object.defineProperty(target, name, before);
  else Reflect.deleteProperty(target, name);
}

/** Finishes an LLM span from the response body: a JSON text, or a stream's assembled result. */
function finishLlmSpan(
  span: Span,
  api: LlmApi,
  status: number,
  body: string | AssembledStream,
  failure: unknown,
  captureContent: boolean,
  endedAt?: number,
): void {
  try {
    const { attributes, error } = answerOutcome(api, status, body, captureContent);
    span.setAttributes(attributes);
    // A cut connection says more than what the stream's events then lack; an error status most.
    if (failure !== undefined && status < 400) {
      span.setAttribute('error.type', 'stream_cut');
      span.setStatus({
        code: SpanStatusCode.ERROR,
        message: `the response ended early: ${failure instanceof Error ? failure.message : String(failure)}`,
      });
    } else if (error) {
      span.setAttribute('error.type', error.type);
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
    }
  } finally {
    span.end(endedAt);
  }
}
