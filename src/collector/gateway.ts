/**
 * The LLM gateway: an OpenAI- and Anthropic-compatible endpoint that forwards each call to the
 * real model server and records it as an LLM span, for agents agl cannot instrument (any
 * language, any binary). The agent's `OPENAI_BASE_URL` points at
 * `/v1/gateway/rollouts/{rollout}/attempts/{attempt}/v1`, its `ANTHROPIC_BASE_URL` at the same
 * without `/v1` (or `/v1/gateway/v1` with
 * `x-rollout-id` / `x-attempt-id` headers, or none). Answers stream through chunk by chunk while
 * the span gets the assembled response, with the same attributes as agl's fetch capture, so
 * `llm_calls` reads both alike.
 */
import type { GenAiRecording } from '../otlp/genai-documents.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Transform } from 'node:stream';
import { createBrotliDecompress, createUnzip } from 'node:zlib';
import { parsedUrl, StreamAssembler, type AssembledStream, type LlmApi } from '../otlp/llm-exchange.js';
import type { LightningStore } from '../api/lightning-store.js';
import type { BatchSink } from '../otlp/batch.js';
import type { LlmResource } from '../api/types.js';
import { BodyError, readBody } from './body.js';
import { bearerCheck, type Route } from './http.js';
import { CallRecord, SpanBuffer, type Attribution } from './gateway-span.js';
import { httpExchange, httpStream, type AnswerHeaders, type Exchange } from './upstream-http.js';

export interface GatewayOptions {
  /** Base URL (with its `/v1`) for calls whose rollout has no `llm` resource. */
  readonly upstream?: string;
  /** API key sent to `upstream`; an `llm` resource brings its own. */
  readonly upstreamKey?: string;
  /** Base URL of an Anthropic-compatible server (as `ANTHROPIC_BASE_URL`) for Messages calls whose rollout has no `llm` resource. */
  readonly anthropicUpstream?: string;
  /** API key (`x-api-key`) sent to `anthropicUpstream`. */
  readonly anthropicUpstreamKey?: string;
  /** The longest an upstream exchange may take, streaming included. */
  readonly timeoutMs: number;
  /** Ask the upstream (vLLM) for token ids on completion calls. */
  readonly returnTokenIds: boolean;
  /** Ask the upstream for the logprobs of the sampled tokens on completion calls. */
  readonly returnLogprobs?: boolean;
  /** Send the agent's own Authorization on to an upstream that has no key of its own. */
  readonly passAgentKey?: boolean;
  /** agl's own token (`--token`), which agents send as their key: never sent upstream. */
  readonly serverToken?: string;
  readonly maxBodyBytes: number;
  /** The GenAI documents recorded besides the exchange (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT). */
  readonly genAi?: GenAiRecording;
}

const APIS: [path: string, api: LlmApi][] = [
  ['chat/completions', 'chat'],
  ['completions', 'text_completion'],
  ['responses', 'responses'],
  ['messages', 'messages'],
];

/** Where one call goes, and what the gateway changes in it on the way. */
export interface Upstream {
  readonly base: string;
  readonly apiKey?: string;
  /** The model the call is sent to, in place of the agent's. */
  readonly model?: string;
  /** Sampling parameters for those the agent's request leaves out. */
  readonly sampling: Record<string, unknown>;
  /** Parameters that replace the agent's own (Agent Lightning v1's per-mode sampling). */
  readonly forced?: Record<string, unknown>;
  /** Token ids (and logprobs) asked for on completion calls whatever the agent asked; else the gateway's options say. */
  readonly tokenIds?: boolean;
  readonly logprobs?: boolean;
  /** Attributes the call's span gets beside the exchange's own. */
  readonly attributes?: Record<string, unknown>;
}

/** An error answered to the agent in its API's error shape, so its client shows the message. */
class GatewayError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = 'agl_gateway_error',
  ) {
    super(message);
  }
}

function sendError(response: ServerResponse, error: GatewayError, api?: LlmApi): void {
  const body = JSON.stringify(
    api === 'messages'
      ? { type: 'error', error: { type: error.type, message: error.message } }
      : { error: { message: error.message, type: error.type, code: null } },
  );
  response.writeHead(error.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  response.end(body);
}

const fromHeaders = (request: IncomingMessage): Attribution => {
  const header = (name: string) => {
    const value = request.headers[name];
    return typeof value === 'string' && value !== '' ? value : null;
  };
  return { rolloutId: header('x-rollout-id'), attemptId: header('x-attempt-id') };
};

export interface Gateway {
  readonly routes: Route[];
  /**
   * Forwards one call to `upstream` and records it, as the gateway's own routes do (Agent
   * Lightning v1's proxy): resolves once the exchange has ended, answered, failed or cut.
   */
  forward(
    api: LlmApi,
    path: string,
    ids: Attribution,
    upstream: Upstream,
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void>;
  /** Stores the spans still buffered (the server calls it when closing). */
  flush(): Promise<void>;
}

/** The gateway's routes: calls are forwarded upstream, their spans go to `sink`. */
export function gateway(store: LightningStore, sink: BatchSink, options: GatewayOptions): Gateway {
  const spans = new SpanBuffer(sink);
  const deadlines = new Deadlines(options.timeoutMs);
  const agentKey = agentKeyOf(options);
  const routes: Route[] = [];
  const prefixes: [string, (request: IncomingMessage, params: string[]) => Attribution][] = [
    [
      '/v1/gateway/rollouts/{rollout_id}/attempts/{attempt_id}/v1',
      (_request, [rolloutId, attemptId]) => ({ rolloutId, attemptId }),
    ],
    ['/v1/gateway/v1', (request) => fromHeaders(request)],
  ];
  for (const [prefix, attribution] of prefixes) {
    for (const [path, api] of APIS) {
      routes.push({
        method: 'POST',
        path: `${prefix}/${path}`,
        handle: (request, response, params) => {
          const ids = attribution(request, params);
          return forwardCall(
            spans,
            deadlines,
            options,
            api,
            path,
            ids,
            () => upstreamFor(store, options, ids, api),
            agentKey(request),
            request,
            response,
          );
        },
      });
    }
    routes.push({
      method: 'GET',
      path: `${prefix}/models`,
      handle: (request, response, params) =>
        forwardModels(store, options, attribution(request, params), agentKey(request), response),
    });
  }
  return {
    routes,
    forward: (api, path, ids, upstream, request, response) =>
      forwardCall(
        spans,
        deadlines,
        options,
        api,
        path,
        ids,
        async () => upstream,
        agentKey(request),
        request,
        response,
      ),
    flush: () => spans.flush(),
  };
}

/**
 * Where a call goes: the rollout's `llm` resource (its current version), else `--upstream`, or
 * for Anthropic's Messages API `--anthropic-upstream`.
 */
async function upstreamFor(
  store: LightningStore,
  options: GatewayOptions,
  ids: Attribution,
  api?: LlmApi,
): Promise<Upstream> {
  if (ids.rolloutId !== null) {
    const rollout = await store.getRolloutById(ids.rolloutId);
    if (!rollout) throw new GatewayError(404, `agl gateway: no rollout "${ids.rolloutId}"`, 'invalid_request_error');
    if (ids.attemptId !== null && (await store.getLatestAttempt(ids.rolloutId))?.attempt_id !== ids.attemptId) {
      const { items } = await store.queryAttempts(ids.rolloutId);
      if (!items.some((attempt) => attempt.attempt_id === ids.attemptId)) {
        throw new GatewayError(
          404,
          `agl gateway: rollout "${ids.rolloutId}" has no attempt "${ids.attemptId}"`,
          'invalid_request_error',
        );
      }
    }
    const resources = rollout.resources_id
      ? await store.getResourcesById(rollout.resources_id)
      : await store.getLatestResources();
    const llm = Object.values(resources?.resources ?? {}).find(
      (r): r is LlmResource => r.resource_type === 'llm' || r.resource_type === 'proxy_llm',
    );
    if (llm)
      return {
        base: llm.endpoint,
        apiKey: llm.api_key ?? undefined,
        model: llm.model || undefined,
        sampling: llm.sampling_parameters ?? {},
      };
  }
  if (api === 'messages') {
    if (options.anthropicUpstream)
      return { base: anthropicBase(options.anthropicUpstream), apiKey: options.anthropicUpstreamKey, sampling: {} };
    throw new GatewayError(
      502,
      'agl gateway: no upstream for this call: its rollout has no "llm" resource and agl serve has no --anthropic-upstream',
    );
  }
  if (options.upstream) return { base: options.upstream, apiKey: options.upstreamKey, sampling: {} };
  throw new GatewayError(
    502,
    'agl gateway: no upstream for this call: its rollout has no "llm" resource and agl serve has no --upstream',
  );
}

const upstreamUrl = (base: string, path: string) => `${base.replace(/\/+$/, '')}/${path}`;

/** An Anthropic base URL is given as its SDK takes it, without the `/v1` its paths start with. */
const anthropicBase = (base: string) => {
  const trimmed = base.replace(/\/+$/, '');
  return trimmed.endsWith('/v1') ? trimmed : `${trimmed}/v1`;
};

/** The headers of Anthropic's API an agent sends that go on as they are (its version and betas). */
const ANTHROPIC_PASSED = ['anthropic-version', 'anthropic-beta'];

/**
 * Anthropic authenticates with `x-api-key`: the upstream's key, else (with --pass-agent-key) the
 * agent's own, unless it is agl's token.
 */
function anthropicHeaders(
  upstream: Upstream,
  request: IncomingMessage,
  options: GatewayOptions,
): Record<string, string> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
  };
  for (const name of ANTHROPIC_PASSED) {
    const value = request.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  const agentKey = request.headers['x-api-key'];
  const key =
    upstream.apiKey ??
    (options.passAgentKey && typeof agentKey === 'string' && agentKey !== options.serverToken ? agentKey : undefined);
  if (key) headers['x-api-key'] = key;
  return headers;
}

function upstreamHeaders(upstream: Upstream, agentAuthorization?: string): Record<string, string> {
  const authorization = upstream.apiKey ? `Bearer ${upstream.apiKey}` : agentAuthorization;
  return {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    ...(authorization ? { authorization } : {}),
  };
}

/** Upstream answer headers the agent gets (the body goes on byte for byte). */
function relayedHeaders(headers: AnswerHeaders): AnswerHeaders {
  const kept = { ...headers };
  for (const name of ['connection', 'keep-alive', 'transfer-encoding']) delete kept[name];
  return kept;
}

/** The agent's Authorization to pass on (--pass-agent-key), unless it is agl's own token. */
function agentKeyOf(options: GatewayOptions): (request: IncomingMessage) => string | undefined {
  if (!options.passAgentKey) return () => undefined;
  const isServerToken = options.serverToken ? bearerCheck(options.serverToken) : () => false;
  return ({ headers: { authorization } }) => (isServerToken(authorization) ? undefined : authorization);
}

async function forwardModels(
  store: LightningStore,
  options: GatewayOptions,
  ids: Attribution,
  agentKey: string | undefined,
  response: ServerResponse,
): Promise<void> {
  const signal = AbortSignal.timeout(options.timeoutMs);
  try {
    const upstream = await upstreamFor(store, options, ids);
    const answer = await httpStream(
      upstreamUrl(upstream.base, 'models'),
      'GET',
      upstreamHeaders(upstream, agentKey),
      undefined,
      signal,
    );
    response.writeHead(answer.status, relayedHeaders(answer.headers));
    for await (const chunk of answer.body) response.write(chunk);
    response.end();
  } catch (error) {
    if (response.headersSent) response.destroy();
    else sendError(response, asGatewayError(signal.reason ?? error, 'models'));
  }
}

function asGatewayError(error: unknown, what: string): GatewayError {
  if (error instanceof GatewayError) return error;
  if (error instanceof BodyError)
    return new GatewayError(error.status, `agl gateway: ${error.message}`, 'invalid_request_error');
  const name = (error as Error)?.name;
  if (name === 'TimeoutError')
    return new GatewayError(504, `agl gateway: the upstream did not answer ${what} in time`, 'upstream_timeout');
  // A system error says it in its code (ECONNREFUSED); undici's own errors in their message.
  const code = (error as NodeJS.ErrnoException)?.code;
  const reason = (code?.startsWith('UND_ERR') ? undefined : code) ?? (error as Error)?.message ?? String(error);
  return new GatewayError(
    502,
    `agl gateway: the upstream could not be reached for ${what}: ${reason}`,
    'upstream_error',
  );
}

/**
 * The request as sent upstream: the resource's model and default sampling, token ids asked
 * for; null when that changes nothing, and the agent's own bytes go on.
 */
function upstreamBody(
  api: LlmApi,
  body: Record<string, unknown>,
  upstream: Upstream,
  options: GatewayOptions,
): Record<string, unknown> | null {
  const completion = api === 'chat' || api === 'text_completion';
  const askTokenIds =
    completion &&
    (upstream.tokenIds === undefined
      ? options.returnTokenIds && body.return_token_ids === undefined
      : upstream.tokenIds && body.return_token_ids !== true);
  // Chat takes `logprobs: true`; the completions API a count of alternatives (1: the sampled token).
  const askLogprobs =
    completion &&
    (upstream.logprobs === undefined
      ? options.returnLogprobs === true && body.logprobs === undefined
      : upstream.logprobs && !body.logprobs);
  const newModel = upstream.model !== undefined && upstream.model !== body.model;
  const defaults = Object.keys(upstream.sampling).some((key) => !(key in body));
  const forced = Object.entries(upstream.forced ?? {}).some(([key, value]) => body[key] !== value);
  if (!askTokenIds && !askLogprobs && !newModel && !defaults && !forced) return null;
  const sent: Record<string, unknown> = { ...upstream.sampling, ...body, ...upstream.forced };
  if (newModel) sent.model = upstream.model;
  if (askTokenIds) sent.return_token_ids = true;
  if (askLogprobs) sent.logprobs = api === 'chat' ? true : 1;
  return sent;
}

async function forwardCall(
  spans: SpanBuffer,
  deadlines: Deadlines,
  options: GatewayOptions,
  api: LlmApi,
  path: string,
  ids: Attribution,
  upstreamOf: () => Promise<Upstream>,
  agentKey: string | undefined,
  request: IncomingMessage,
  response: ServerResponse,
): Promise<void> {
  const startTime = Date.now() / 1000;
  let bytes: Buffer;
  let raw: string;
  let body: Record<string, unknown>;
  let upstream: Upstream;
  try {
    bytes = await readBody(request, options.maxBodyBytes);
    raw = bytes.toString('utf8');
    try {
      body = JSON.parse(raw);
    } catch (error) {
      throw new GatewayError(
        400,
        `agl gateway: the body is not JSON: ${(error as Error).message}`,
        'invalid_request_error',
      );
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body))
      throw new GatewayError(400, 'agl gateway: the body must be a JSON object', 'invalid_request_error');
    upstream = await upstreamOf();
  } catch (error) {
    sendError(response, asGatewayError(error, path), api);
    return;
  }

  const changed = upstreamBody(api, body, upstream, options);
  const sentBody = changed ?? body;
  const sent = changed ? JSON.stringify(changed) : raw;
  const sentBytes = changed ? Buffer.from(sent) : bytes; // the agent's bytes, not encoded again
  const url = parsedUrl(upstreamUrl(upstream.base, path));
  const record = new CallRecord(
    api,
    url,
    sentBody,
    sent,
    startTime,
    ids,
    request.headers.traceparent,
    upstream.attributes,
    options.genAi,
  );
  const headers =
    api === 'messages' ? anthropicHeaders(upstream, request, options) : upstreamHeaders(upstream, agentKey);
  try {
    await relay(url, headers, sentBytes, deadlines, response, record, path);
  } finally {
    spans.add(record.span());
  }
}

/**
 * The deadlines of the upstream exchanges in flight, on one timer: every call of a gateway has
 * the same timeout, so they expire in the order they started. A timer and an AbortController of
 * each call's own were about 3% of the gateway's CPU per call.
 */
class Deadlines {
  /** Each exchange's cut, with its deadline (performance.now()), in the order they started. */
  private readonly pending = new Map<() => void, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly timeoutMs: number) {}

  /** `expire` runs once the timeout has passed, unless the returned function is called first. */
  add(expire: () => void): () => void {
    this.pending.set(expire, performance.now() + this.timeoutMs);
    this.timer ??= this.arm(this.timeoutMs);
    return () => this.pending.delete(expire);
  }

  // Unref'd: a call in flight holds its own sockets, and no timer should keep a closed server's process.
  private arm(delayMs: number): NodeJS.Timeout {
    return setTimeout(() => this.expire(), delayMs).unref();
  }

  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    for (const [expire, deadline] of this.pending) {
      if (deadline > now) {
        this.timer = this.arm(deadline - now);
        return;
      }
      this.pending.delete(expire);
      expire();
    }
  }
}

/** Decompressors of the content encodings an upstream may send (zlib's unzip reads gzip and deflate). */
const DECOMPRESSORS: Record<string, () => Transform> = {
  gzip: createUnzip,
  'x-gzip': createUnzip,
  deflate: createUnzip,
  br: createBrotliDecompress,
};

/**
 * The decoded copy of an upstream answer that its span records: the body as text, or a stream's
 * events assembled. The gateway asks for no compression; an answer compressed all the same is
 * relayed as it came, and its decompressed copy is what the span records.
 */
class AnswerCopy {
  /** An SSE stream, assembled into the response a plain call would have answered. */
  streamed = false;
  /** False when the answer's encoding is none the gateway can decode: the span records no body. */
  readable = true;
  private assembler: StreamAssembler | undefined;
  private decompressor: Transform | undefined;
  private decompressed: Promise<void> | undefined;
  private readonly pieces: Buffer[] = [];
  /** A stream's text decoder (made for streams only: a plain answer's pieces are decoded once, whole). */
  private decoder: InstanceType<typeof TextDecoder> | undefined;

  constructor(private readonly api: LlmApi) {}

  start(headers: AnswerHeaders): void {
    this.streamed = String(headers['content-type'] ?? '').includes('text/event-stream');
    if (this.streamed) {
      this.assembler = new StreamAssembler(this.api);
      this.decoder = new TextDecoder();
    }
    const encoding = String(headers['content-encoding'] ?? 'identity').toLowerCase();
    const unzip = encoding === 'identity' ? undefined : DECOMPRESSORS[encoding]?.();
    this.decompressor = unzip;
    this.readable = encoding === 'identity' || unzip !== undefined;
    if (unzip) {
      this.decompressed = new Promise<void>((done) => {
        unzip.on('data', (piece: Buffer) => this.take(piece));
        unzip.once('end', done);
        unzip.once('error', () => done()); // a cut or corrupt body: what came out so far
      });
    }
  }

  write(chunk: Buffer): void {
    if (this.decompressor) this.decompressor.write(chunk);
    else if (this.readable) this.take(chunk);
  }

  /** Ends the copy: what the decompressor still holds comes out. */
  async end(): Promise<void> {
    if (!this.decompressor) return;
    this.decompressor.end();
    await this.decompressed;
  }

  /** The body for the span: the text or the assembled stream; undefined when not readable. */
  result(): string | AssembledStream | undefined {
    if (!this.readable) return undefined;
    return this.assembler ? this.assembler.result() : Buffer.concat(this.pieces).toString('utf8');
  }

  private take(piece: Buffer): void {
    if (this.assembler && this.decoder) this.assembler.feed(this.decoder.decode(piece, { stream: true }));
    else this.pieces.push(piece);
  }
}

/**
 * Sends the call upstream and its answer on to the agent as it arrives, keeping a decoded copy
 * for the span. The answer goes from undici's handler straight to the agent's response, with no
 * stream in between: this runs for every chunk of every call.
 */
function relay(
  url: URL,
  headers: Record<string, string>,
  body: Buffer,
  deadlines: Deadlines,
  response: ServerResponse,
  record: CallRecord,
  path: string,
): Promise<void> {
  const copy = new AnswerCopy(record.api);
  return new Promise<void>((resolve) => {
    let finished = false;
    let exchange: Exchange | undefined;
    const settle = deadlines.add(() => exchange?.abort(new DOMException('the upstream took too long', 'TimeoutError')));
    response.on('close', () => {
      if (!response.writableFinished) exchange?.abort(new Error('the agent closed the connection'));
    });
    const finish = async (failure: unknown) => {
      if (finished) return;
      finished = true;
      settle();
      if (record.status === undefined) {
        // No answer at all: the agent gets the reason in its API's error shape.
        const error = asGatewayError(failure, path);
        record.fail(error.message, error.type);
        sendError(response, error, record.api);
        record.finish(undefined);
        return resolve();
      }
      await copy.end();
      if (failure === undefined) response.end();
      else {
        response.destroy(); // the agent sees the cut, as it would from the upstream itself
        record.fail(
          `the answer ended early: ${(failure as Error)?.message ?? String(failure)}`,
          (failure as Error)?.name === 'TimeoutError' ? 'upstream_timeout' : 'stream_cut',
        );
      }
      record.finish(copy.result());
      resolve();
    };

    try {
      exchange = httpExchange(url, 'POST', headers, body, {
        start(status, answerHeaders) {
          record.status = status;
          copy.start(answerHeaders);
          response.writeHead(status, relayedHeaders(answerHeaders));
          response.on('drain', () => exchange?.resume());
        },
        data(chunk) {
          copy.write(chunk);
          return response.write(chunk);
        },
        end() {
          void finish(undefined);
        },
        error(error) {
          void finish(error);
        },
      });
    } catch (error) {
      void finish(error); // undici reports refused arguments through error(); a throw ends alike
    }
  });
}
