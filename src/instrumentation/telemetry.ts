import type { IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import { trace, type Tracer } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { TraceExporterMetricsHelper } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import {
  BatchLogRecordProcessor,
  type LogRecordExporter,
  type LogRecordProcessor,
  type ReadableLogRecord,
} from '@opentelemetry/sdk-logs';
import { BatchSpanProcessor, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { callSpanStarter, type CallSpanTarget } from './call-span.js';
import {
  ConfigError,
  LIBRARY_INSTRUMENTATIONS,
  readConfig,
  type InstrumentationName,
  type RegisterConfig,
} from './config.js';
import { FetchCapture } from './fetch-capture.js';
import { installLangChainCapture } from './langchain.js';
import { sendBeforeExit, UnsentSpans } from './exit-flush.js';
import { globalTracerProvider, useFetchCapture } from './recording.js';
import { RolloutSpanProcessor } from './rollout-context.js';
import { requestOf, SpanEncoder, spanSerializer } from '../otlp/span-encoding.js';
import { ATTR } from '../api/semconv.js';

/** How long an exiting process waits for its last spans to be sent. */
const EXIT_FLUSH_MS = 3_000;

const say = (message: string) => process.stderr.write(`agl: ${message}\n`);

/** After a failed export, batches are dropped at once for this long instead of each waiting out its retries. */
const DOWN_PAUSE_MS = 5_000;

/**
 * Sends spans; when the collector cannot be reached it says so once on stderr and drops batches
 * without trying for a few seconds, so that a burst never queues minutes of retries and an
 * exiting app is not held back. Memory stays bounded by the span queue.
 */
class ReportingExporter implements SpanExporter {
  private reported = false;
  private downUntil = 0;

  constructor(
    private inner: SpanExporter,
    public url: string,
    private readonly unsent: UnsentSpans,
  ) {}

  /** Exports to another collector from now on (batches in flight still go where they went). */
  retarget(inner: SpanExporter, url: string): void {
    this.inner = inner;
    this.url = url;
    this.reported = false;
    this.downUntil = 0;
  }

  get down(): boolean {
    return Date.now() < this.downUntil;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    if (this.down) {
      done({ code: ExportResultCode.FAILED, error: new Error(`the collector at ${this.url} is unreachable`) });
      return;
    }
    const { inner, url } = this;
    inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) {
        this.reported = false;
        this.unsent.delivered(spans);
      } else if (inner === this.inner) this.failed('spans', url, result.error);
      // else a batch sent before retarget() failed (an in-process Trainer's server that closed):
      // it says nothing of the collector spans go to now, which must not be paused for it.
      done(result);
    });
  }

  /** An export to the collector failed: nothing is sent to it for a few seconds, and agl says so once. */
  failed(what: string, url: string, error: Error | undefined): void {
    this.downUntil = Date.now() + DOWN_PAUSE_MS;
    if (this.reported) return;
    this.reported = true;
    say(`cannot send ${what} to ${url} (${error?.message ?? 'export failed'}); ${what} are dropped until it answers`);
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/**
 * The OTLP exporter of the app's log records, to where its spans go (also after `recordTo`), and
 * like them dropped at once while the collector is down. It counts the records emitted and not
 * yet exported (its `counter` processor goes before the batch processor), so that an ending app
 * waits for them as for its spans.
 */
class LogsExporter implements LogRecordExporter {
  private inner!: OTLPLogExporter;
  private url!: string;
  pending = 0;
  readonly counter: LogRecordProcessor = {
    onEmit: () => void this.pending++,
    forceFlush: async () => {},
    shutdown: async () => {},
  };

  constructor(
    url: string,
    private readonly options: { headers?: Record<string, string>; timeoutMillis: number },
    private readonly collector: ReportingExporter,
  ) {
    this.retarget(url);
  }

  retarget(url: string): void {
    this.url = url;
    this.inner = new OTLPLogExporter({ url, ...this.options });
  }

  export(records: ReadableLogRecord[], done: (result: ExportResult) => void): void {
    const settle = (result: ExportResult) => {
      this.pending = Math.max(0, this.pending - records.length);
      done(result);
    };
    if (this.collector.down) {
      settle({ code: ExportResultCode.FAILED, error: new Error(`the collector at ${this.url} is unreachable`) });
      return;
    }
    const { inner, url } = this;
    inner.export(records, (result) => {
      if (result.code !== ExportResultCode.SUCCESS && inner === this.inner)
        this.collector.failed('log records', url, result.error);
      settle(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }
}

const envNumber = (name: string) => {
  const value = Number(process.env[name]);
  return process.env[name] && Number.isFinite(value) ? value : undefined;
};

/** Headers of the OTLP requests, as the exporter sends them (the standard variables and agl's token). */
function otlpHeaders(config: RegisterConfig): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const variable of ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TRACES_HEADERS']) {
    for (const pair of (process.env[variable] ?? '').split(',')) {
      const at = pair.indexOf('=');
      if (at > 0) headers[pair.slice(0, at).trim().toLowerCase()] = decodeURIComponent(pair.slice(at + 1).trim());
    }
  }
  if (config.token) headers.authorization = `Bearer ${config.token}`;
  return headers;
}

interface Delivery {
  /** Sends what is queued (asynchronously). */
  flush(): Promise<void>;
  /** Whether spans wait to be sent and the collector is worth trying, or log records wait. */
  hasUnsent(): boolean;
  /** Sends the spans still unsent, blocking (the process is exiting; log records wait in vain). */
  sendNow(): void;
}

/**
 * The SDK's OTLP/protobuf exporter (OTLPTraceExporter) with one change: requests are joined from
 * spans encoded as they ended (span-encoding.ts), not encoded all at once at export. The queues
 * (export, exit flush) hold those encodings, not the spans.
 */
function spanExporterTo(url: string, auth: { headers?: Record<string, string> }): SpanExporter {
  return new OTLPExporterBase(
    createOtlpHttpExportDelegate(
      convertLegacyHttpOptions(
        {
          url,
          timeoutMillis:
            envNumber('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') ?? envNumber('OTEL_EXPORTER_OTLP_TIMEOUT') ?? 5_000,
          ...auth,
        },
        'TRACES',
        'v1/traces',
        { 'Content-Type': 'application/x-protobuf' },
      ),
      spanSerializer,
      'otlp_http_span_exporter',
      TraceExporterMetricsHelper,
      undefined,
    ),
  );
}

/** `@opentelemetry/auto-instrumentations-node`'s entry, loaded only when a library instrumentation is on. */
type AutoInstrumentations = typeof import('@opentelemetry/auto-instrumentations-node');

/** agl's own routes: OTLP ingest, the store's REST API, the gateway. */
const AGL_ROUTES = /^\/v1\/(traces|logs|metrics|agl|gateway)(\/|\?|$)/;

/**
 * A request to an agl server in this process (an in-process Trainer's): no server span. Each of
 * them would be exported to that same server, making another request to record, and the
 * agent's calls through the gateway already have their LLM spans. Once any module patches
 * node:http (the library instrumentations load some that do), every server in the process
 * makes server spans, agl's own too.
 */
function isAglRequest(request: IncomingMessage): boolean {
  return AGL_ROUTES.test(request.url ?? '');
}

/**
 * The auto-instrumentations of the libraries the config leaves on, each switched on or off by
 * name (so that the package's own reading of OTEL_NODE_* and its defaults never apply: agl read
 * them once, in config.ts), and the package's undici, openai and http ones always off (agl's
 * recorders are those). The package loads every instrumentation it holds (about a second of
 * start-up, bench/instrumentation.ts): an app that turns all of them off does not load it.
 */
function libraryInstrumentations(
  enabled: ReadonlySet<InstrumentationName>,
): ReturnType<AutoInstrumentations['getNodeAutoInstrumentations']> {
  if (!LIBRARY_INSTRUMENTATIONS.some((name) => enabled.has(name))) return [];
  const { getNodeAutoInstrumentations } = createRequire(import.meta.url)(
    '@opentelemetry/auto-instrumentations-node',
  ) as AutoInstrumentations;
  const switches = (names: readonly string[], on: (name: string) => boolean) =>
    names.map((name) => [`@opentelemetry/instrumentation-${name}`, { enabled: on(name) }]);
  return getNodeAutoInstrumentations(
    Object.fromEntries([
      ...switches(LIBRARY_INSTRUMENTATIONS, (name) => enabled.has(name as InstrumentationName)),
      ...switches(['undici', 'openai', 'http'], () => false),
    ]),
  );
}

/**
 * Starts the SDK: what delivers its spans; the export pipeline's first stage (ended spans go
 * through it to the queue); and whether the API's tracers are this SDK's (not when the app
 * registered a tracer provider of its own first: the SDK then records nothing of its own).
 */
function startSdk(config: RegisterConfig): { delivery: Delivery; encoder: SpanProcessor; global: boolean } {
  const queueSize = envNumber('OTEL_BSP_MAX_QUEUE_SIZE') ?? 2048;
  const unsent = new UnsentSpans(queueSize);
  // agl's token, for the spans' and the log records' exporters alike.
  const auth = config.token ? { headers: { authorization: `Bearer ${config.token}` } } : {};
  const exporterTo = (url: string) => spanExporterTo(url, auth);
  // A bounded queue (OpenTelemetry's default size) that drops when full; at most 4 batches, under the
  // exporter's limit of 30 concurrent exports, so a flush of a full queue never overruns it.
  const reporting = new ReportingExporter(exporterTo(config.tracesUrl), config.tracesUrl, unsent);
  const batches = new BatchSpanProcessor({
    exporter: reporting,
    maxQueueSize: queueSize,
    maxExportBatchSize: envNumber('OTEL_BSP_MAX_EXPORT_BATCH_SIZE') ?? 512,
    scheduledDelayMillis: envNumber('OTEL_BSP_SCHEDULE_DELAY') ?? 500,
    exportTimeoutMillis: envNumber('OTEL_BSP_EXPORT_TIMEOUT') ?? 10_000,
  });
  // The SDK's defaults would send the app's log records and metrics to the default OTLP endpoint
  // (localhost:4318), wherever AGL_ENDPOINT points: log records go where the spans go (agl keeps
  // them: GenAI events are log records), and metrics, which agl does not keep, only where
  // OTEL_METRICS_EXPORTER asks.
  const logs = process.env.OTEL_LOGS_EXPORTER
    ? undefined
    : new LogsExporter(
        config.logsUrl,
        {
          ...auth,
          timeoutMillis:
            envNumber('OTEL_EXPORTER_OTLP_LOGS_TIMEOUT') ?? envNumber('OTEL_EXPORTER_OTLP_TIMEOUT') ?? 5_000,
        },
        reporting,
      );
  const logRecords = logs && new BatchLogRecordProcessor({ exporter: logs });
  retarget = (url) => {
    reporting.retarget(exporterTo(url), url);
    logs?.retarget(url.replace(/\/v1\/traces$/, '/v1/logs'));
  };
  retargetUrl = () => reporting.url;
  const encoder = new SpanEncoder([unsent, batches]);
  const sdk = new NodeSDK({
    resource: resourceFromAttributes({
      ...(config.rolloutId ? { [ATTR.rolloutId]: config.rolloutId } : {}),
      ...(config.attemptId ? { [ATTR.attemptId]: config.attemptId } : {}),
    }),
    spanProcessors: [new RolloutSpanProcessor(), encoder],
    ...(logs && logRecords ? { logRecordProcessors: [logs.counter, logRecords] } : {}),
    ...(process.env.OTEL_METRICS_EXPORTER ? {} : { metricReaders: [] }),
    instrumentations: [
      ...(config.instrumentations.has('http')
        ? [new HttpInstrumentation({ ignoreIncomingRequestHook: isAglRequest })]
        : []),
      ...libraryInstrumentations(config.instrumentations),
    ],
  });
  const before = globalTracerProvider();
  sdk.start();
  const global = globalTracerProvider() !== before;
  const delivery: Delivery = {
    flush: async () => {
      await Promise.all([batches.forceFlush(), logRecords?.forceFlush()]);
    },
    hasUnsent: () => (unsent.size > 0 || (logs?.pending ?? 0) > 0) && !reporting.down,
    sendNow: () => {
      if (unsent.size > 0 && !reporting.down)
        sendBeforeExit(reporting.url, otlpHeaders(config), requestOf(unsent.take()), EXIT_FLUSH_MS);
    },
  };
  return { delivery, encoder, global };
}

/**
 * Flushes at the end of a normal run, on SIGINT/SIGTERM before the process goes, and, blocking,
 * on `process.exit()`. `beforeExit` fires again once a flush empties the loop: it flushes only
 * while spans are unsent, a few times at most, and then lets the process end.
 */
function flushOnExit(delivery: Delivery): void {
  const flush = delivery.flush;
  // An export that failed was reported by the ReportingExporter; the process is ending anyway.
  const bounded = () =>
    Promise.race([flush().catch(() => {}), new Promise<void>((resolve) => setTimeout(resolve, EXIT_FLUSH_MS).unref())]);
  let tries = 0;
  process.on('beforeExit', () => {
    if (delivery.hasUnsent() && tries++ < 3) void bounded();
  });
  process.on('exit', () => delivery.sendNow());
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    const onSignal = () => {
      // With handlers of its own the app decides when to exit; otherwise exit as the default
      // would have (killed by the signal), once the spans are out.
      const appHandles = process.listenerCount(signal) > 1;
      bounded().finally(() => {
        if (appHandles) return;
        process.removeListener(signal, onSignal);
        process.kill(process.pid, signal);
      });
    };
    process.on(signal, onSignal);
  }
}

/**
 * Where call-span.ts's spans go: through the export pipeline, under the resource and scope of the
 * SDK's spans from this tracer, one of agl's SDK (the resource NodeSDK put together from its
 * detectors; a span started and never ended is the public way to it).
 */
function callSpanTarget(tracer: Tracer, processor: SpanProcessor): CallSpanTarget {
  const probe = tracer.startSpan('agl: resource probe') as unknown as ReadableSpan;
  return { resource: probe.resource, instrumentationScope: probe.instrumentationScope, processor };
}

let started = false;
let retarget: ((tracesUrl: string) => void) | undefined;
let retargetUrl: (() => string) | undefined;

/**
 * Records this process's spans to the agl server at `endpoint` until `restore()`, whether
 * recording started already (agl/register, an earlier Trainer) or not: an in-process Trainer's
 * rollouts belong in its own store.
 */
export function recordTo(endpoint: string): { restore(): void } {
  const previous = process.env.AGL_ENDPOINT;
  const previousUrl = retargetUrl?.();
  process.env.AGL_ENDPOINT = endpoint;
  if (!started) startTelemetry();
  else retarget?.(`${endpoint.replace(/\/+$/, '')}/v1/traces`);
  return {
    restore: () => {
      if (previous === undefined) delete process.env.AGL_ENDPOINT;
      else process.env.AGL_ENDPOINT = previous;
      if (previousUrl !== undefined) retarget?.(previousUrl);
    },
  };
}

/** Starts agl's telemetry once per process; never throws into the app. */
export function startTelemetry(): void {
  if (started || /^true$/i.test(process.env.OTEL_SDK_DISABLED ?? '')) return;
  started = true;
  let config: RegisterConfig;
  try {
    config = readConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    say(`${error.message}; nothing is recorded`);
    return;
  }
  try {
    const { delivery, encoder, global } = startSdk(config);
    const tracer = trace.getTracer('agl');
    // Where the app's own provider records agl's spans, its LLM spans go there too, as the SDK's.
    const callTarget = global && !config.sdkCallSpans ? callSpanTarget(tracer, encoder) : undefined;
    const langchain = config.instrumentations.has('langchain')
      ? installLangChainCapture(tracer, config.captureContent)
      : undefined;
    const fetchCapture = config.instrumentations.has('fetch')
      ? new FetchCapture({
          tracer,
          captureContent: config.captureContent,
          returnTokenIds: config.returnTokenIds,
          llmParent: langchain?.modelRunContext,
          startLlmSpan: callTarget && callSpanStarter(callTarget),
          genAi: config.genAi,
        })
      : undefined;
    fetchCapture?.enable();
    useFetchCapture(fetchCapture);
    flushOnExit({
      flush: () => {
        fetchCapture?.endOpen();
        return delivery.flush();
      },
      hasUnsent: () => delivery.hasUnsent() || (fetchCapture?.openCount() ?? 0) > 0,
      sendNow: () => {
        fetchCapture?.endOpen();
        delivery.sendNow();
      },
    });
  } catch (error) {
    say(
      `could not start recording (${error instanceof Error ? error.message : String(error)}); the app runs without it`,
    );
  }
}
