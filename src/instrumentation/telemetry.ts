import { trace } from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { BatchSpanProcessor, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { ConfigError, readConfig, type RegisterConfig } from './config.js';
import { installFetchCapture } from './fetch-capture.js';
import { installLangChainCapture } from './langchain.js';
import { RolloutSpanProcessor } from './rollout-context.js';
import { ATTR } from '../semconv.js';

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

  constructor(private readonly inner: SpanExporter, private readonly url: string) {}

  get down(): boolean {
    return Date.now() < this.downUntil;
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    if (this.down) {
      done({ code: ExportResultCode.FAILED, error: new Error(`the collector at ${this.url} is unreachable`) });
      return;
    }
    this.inner.export(spans, (result) => {
      if (result.code === ExportResultCode.SUCCESS) {
        this.reported = false;
      } else {
        this.downUntil = Date.now() + DOWN_PAUSE_MS;
        if (!this.reported) {
          this.reported = true;
          say(`cannot send spans to ${this.url} (${result.error?.message ?? 'export failed'}); spans are dropped until it answers`);
        }
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** Notes that a span ended, so that an exiting process knows whether it has anything to send. */
class EndedSpans implements SpanProcessor {
  unsent = false;
  onStart(): void {}
  onEnd(): void {
    this.unsent = true;
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

const envNumber = (name: string) => {
  const value = Number(process.env[name]);
  return process.env[name] && Number.isFinite(value) ? value : undefined;
};

function startSdk(config: RegisterConfig): { flush: () => Promise<void>; hasUnsent: () => boolean } {
  const ended = new EndedSpans();
  const exporter = new OTLPTraceExporter({
    url: config.tracesUrl,
    timeoutMillis: envNumber('OTEL_EXPORTER_OTLP_TRACES_TIMEOUT') ?? envNumber('OTEL_EXPORTER_OTLP_TIMEOUT') ?? 5_000,
    ...(config.token ? { headers: { authorization: `Bearer ${config.token}` } } : {}),
  });
  // A bounded queue (OpenTelemetry's default size) that drops when full; at most 4 batches, under the
  // exporter's limit of 30 concurrent exports, so a flush of a full queue never overruns it.
  const reporting = new ReportingExporter(exporter, config.tracesUrl);
  const batches = new BatchSpanProcessor({
    exporter: reporting,
    maxQueueSize: envNumber('OTEL_BSP_MAX_QUEUE_SIZE') ?? 2048,
    maxExportBatchSize: envNumber('OTEL_BSP_MAX_EXPORT_BATCH_SIZE') ?? 512,
    scheduledDelayMillis: envNumber('OTEL_BSP_SCHEDULE_DELAY') ?? 500,
    exportTimeoutMillis: envNumber('OTEL_BSP_EXPORT_TIMEOUT') ?? 10_000,
  });
  const sdk = new NodeSDK({
    resource: resourceFromAttributes({
      ...(config.rolloutId ? { [ATTR.rolloutId]: config.rolloutId } : {}),
      ...(config.attemptId ? { [ATTR.attemptId]: config.attemptId } : {}),
    }),
    spanProcessors: [new RolloutSpanProcessor(), ended, batches],
    instrumentations: config.instrumentations.has('http') ? [new HttpInstrumentation()] : [],
  });
  sdk.start();
  return {
    flush: () => {
      ended.unsent = false;
      return batches.forceFlush();
    },
    hasUnsent: () => ended.unsent && !reporting.down,
  };
}

/**
 * Flushes at the end of a normal run, and on SIGINT/SIGTERM before the process goes.
 * `hasUnsent` says whether spans ended since the last flush: `beforeExit` fires again once a
 * flush empties the loop, and must then let the process end.
 */
function flushOnExit(flush: () => Promise<void>, hasUnsent: () => boolean): void {
  const bounded = () =>
    Promise.race([flush().catch(() => {}), new Promise<void>((resolve) => setTimeout(resolve, EXIT_FLUSH_MS).unref())]);
  process.on('beforeExit', () => {
    if (hasUnsent()) void bounded();
  });
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

let started = false;

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
    const { flush, hasUnsent } = startSdk(config);
    const tracer = trace.getTracer('agl');
    const langchain = config.instrumentations.has('langchain') ? installLangChainCapture(tracer, config.captureContent) : undefined;
    const fetchCapture = config.instrumentations.has('fetch')
      ? installFetchCapture({ tracer, captureContent: config.captureContent, returnTokenIds: config.returnTokenIds, llmParent: langchain?.modelRunContext })
      : undefined;
    flushOnExit(
      () => {
        fetchCapture?.endOpen();
        return flush();
      },
      () => hasUnsent() || (fetchCapture?.openCount() ?? 0) > 0,
    );
  } catch (error) {
    say(`could not start recording (${error instanceof Error ? error.message : String(error)}); the app runs without it`);
  }
}
