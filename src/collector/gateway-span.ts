import { randomBytes } from 'node:crypto';
import { genAiAttributes, genAiEventAttributes, type GenAiRecording, NO_GENAI } from '../otlp/genai-documents.js';
import {
  answerOutcome,
  codecOf,
  genAiDocuments,
  requestAttributes,
  type AssembledStream,
  type LlmApi,
} from '../otlp/llm-exchange.js';
import { ATTR, GENAI } from '../api/semconv.js';
import { wellFormedJsonText } from '../otlp/well-formed.js';
import { spanRows, type SpanInput } from '../store/span-json.js';
import type { BatchSink } from '../otlp/batch.js';

/** Which rollout and attempt a gateway call belongs to (null: none said). */
export interface Attribution {
  readonly rolloutId: string | null;
  readonly attemptId: string | null;
}

/**
 * Gateway spans are stored in batches a few milliseconds apart: the agent has its answer before
 * its span is written, and a commit per call would cost more than the call itself.
 */
export class SpanBuffer {
  private spans: SpanInput[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** Writes in flight, a timer's included. */
  private readonly writing = new Set<Promise<void>>();

  constructor(
    private readonly sink: BatchSink,
    private readonly delayMs = 100,
    private readonly maxSpans = 1024,
  ) {}

  add(span: SpanInput): void {
    this.spans.push(span);
    if (this.spans.length >= this.maxSpans) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.delayMs);
  }

  /** Resolves once every span added so far is stored (or its write failed): a reader after it sees them. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const spans = this.spans;
    this.spans = [];
    if (spans.length > 0) {
      const write = this.sink.writeSpans(spanRows(...spans), 0).then(
        () => {},
        (error: unknown) => console.error(`agl: ${spans.length} gateway span(s) not stored:`, error),
      );
      this.writing.add(write);
      void write.finally(() => this.writing.delete(write));
    }
    return Promise.all(this.writing).then(() => {});
  }
}

// Ids from a pool of random bytes: one system call per 512 spans instead of two per span.
let pool = Buffer.alloc(0);
let poolAt = 0;
function randomHex(bytes: number): string {
  if (poolAt + bytes > pool.length) {
    pool = randomBytes(8192);
    poolAt = 0;
  }
  poolAt += bytes;
  return pool.toString('hex', poolAt - bytes, poolAt);
}

/** The resource of every gateway span: one object, whose JSON spanRows then makes once. */
const GATEWAY_RESOURCE = Object.freeze({
  attributes: Object.freeze({ 'service.name': 'agl-gateway' }),
  schema_url: '',
});

/** What the span of one gateway call will hold. */
export class CallRecord {
  status: number | undefined;
  private readonly attributes: Record<string, unknown>;
  private error: { message: string; type: string } | undefined;
  private endTime: number | undefined;
  private readonly events: { name: string; attributes: Record<string, unknown>; timestamp: number | null }[] = [];
  private readonly traceId: string;
  private readonly parentId: string | null;

  constructor(
    readonly api: LlmApi,
    url: URL,
    private readonly sentBody: Record<string, unknown>,
    sent: string,
    private readonly startTime: number,
    private readonly ids: Attribution,
    traceparent: string | string[] | undefined,
    extra?: Record<string, unknown>,
    /**
     * The GenAI documents to record besides the exchange, for other OpenTelemetry backends that
     * read agl's spans (genai-documents.ts); the event form is a span event on the call's span.
     */
    private readonly genAi: GenAiRecording = NO_GENAI,
  ) {
    this.attributes = {
      ...extra,
      ...requestAttributes(api, sentBody),
      'gen_ai.provider.name': codecOf(api).provider(url.hostname),
      ...(genAi.olderSystem ? { 'gen_ai.system': codecOf(api).provider(url.hostname) } : {}),
      'server.address': url.hostname,
      'url.full': url.href,
      [ATTR.llmApi]: api,
      [ATTR.llmStreamed]: sentBody.stream === true,
      [ATTR.llmRequest]: sent,
      'agl.gateway': true,
    };
    // An instrumented agent sends its trace context: the call joins the agent's trace.
    const match =
      typeof traceparent === 'string' ? /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(traceparent) : null;
    this.traceId = match ? match[1] : randomHex(16);
    this.parentId = match ? match[2] : null;
  }

  fail(message: string, type: string): void {
    this.error ??= { message, type };
  }

  finish(body: string | AssembledStream | undefined): void {
    this.endTime = Date.now() / 1000;
    if (this.status === undefined) return;
    this.attributes['http.response.status_code'] = this.status;
    const { attributes, error } = answerOutcome(this.api, this.status, body, true);
    Object.assign(this.attributes, attributes);
    if (error) this.fail(error.message, error.type);
    else if (this.genAi.span || this.genAi.event) {
      const { request, output } = genAiDocuments(this.api, this.sentBody, body);
      if (this.genAi.span) Object.assign(this.attributes, genAiAttributes(request, output));
      if (this.genAi.event)
        this.events.push({
          name: GENAI.operationDetails,
          timestamp: this.endTime,
          attributes: genAiEventAttributes(request, output),
        });
    }
  }

  span(): SpanInput {
    if (this.error) this.attributes['error.type'] = this.error.type;
    wellFormed(this.attributes);
    const model = this.attributes['gen_ai.request.model'];
    const operation = codecOf(this.api).operation;
    return {
      rollout_id: this.ids.rolloutId,
      attempt_id: this.ids.attemptId,
      sequence_id: null,
      trace_id: this.traceId,
      span_id: randomHex(8),
      parent_id: this.parentId,
      name: typeof model === 'string' ? `${operation} ${model}` : operation,
      kind: 'CLIENT',
      status: this.error
        ? { status_code: 'ERROR', description: this.error.message.toWellFormed() }
        : { status_code: 'UNSET', description: null },
      attributes: this.attributes,
      events: this.events,
      links: [],
      start_time: this.startTime,
      end_time: this.endTime ?? Date.now() / 1000,
      context: null,
      parent: null,
      resource: GATEWAY_RESOURCE,
    };
  }
}

/** The attributes that hold the exchange's JSON text, whose escapes DuckDB reads as lone surrogates too. */
const EXCHANGE_KEYS = new Set<string>([ATTR.llmRequest, ATTR.llmResponse]);

/**
 * Lone surrogates replaced with U+FFFD in the attributes' strings, in place. The gateway's spans
 * go to the store without the OTLP decoders, which do this where spans enter: a model name or
 * answer field parsed from a body with a `\ud800` escape (or the body's text itself) was stored as JSON that DuckDB cannot
 * read back, and the deriver skipped the call (found by `npm run fuzz`).
 */
function wellFormed(attributes: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(attributes)) {
    if (typeof value === 'string')
      attributes[key] = EXCHANGE_KEYS.has(key) ? wellFormedJsonText(value) : value.toWellFormed();
    else if (Array.isArray(value))
      attributes[key] = value.map((item) => (typeof item === 'string' ? item.toWellFormed() : item));
  }
}
