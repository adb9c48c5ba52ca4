/**
 * `process.exit()` gives no time for the asynchronous flush: its 'exit' handlers run
 * synchronously, then the process is gone. Spans not yet sent at that point are posted by a
 * short-lived worker thread while the main thread waits for it (bounded), so that an agent that
 * ends with `emitReward(...); process.exit(0)` still delivers its reward.
 */
import { Worker } from 'node:worker_threads';
import type { ReadableSpan, SpanProcessor } from '@opentelemetry/sdk-trace';

/** The ended spans that no export has delivered yet (bounded like the export queue). */
export class UnsentSpans implements SpanProcessor {
  private readonly spans = new Set<ReadableSpan>();

  constructor(private readonly limit: number) {}

  get size(): number {
    return this.spans.size;
  }

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if (this.spans.size >= this.limit) return; // the export queue drops it too
    this.spans.add(span);
  }

  /** Spans an export delivered. */
  delivered(spans: readonly ReadableSpan[]): void {
    for (const span of spans) this.spans.delete(span);
  }

  take(): ReadableSpan[] {
    const spans = [...this.spans];
    this.spans.clear();
    return spans;
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

// Runs in the worker: one POST, then it wakes the main thread. The worker records nothing itself.
const SENDER = `
const { workerData } = require('node:worker_threads');
const done = new Int32Array(workerData.done);
fetch(workerData.url, { method: 'POST', headers: workerData.headers, body: workerData.body })
  .then((answer) => answer.arrayBuffer())
  // The process is exiting, and the main thread hears the outcome from hasUnsent: nothing to add.
  .catch(() => {})
  .finally(() => { Atomics.store(done, 0, 1); Atomics.notify(done, 0); });
`;

/** Posts `body` (an OTLP protobuf request) and blocks until it is answered or `timeoutMs` passed. */
export function sendBeforeExit(
  url: string,
  headers: Record<string, string>,
  body: Uint8Array,
  timeoutMs: number,
): boolean {
  const done = new SharedArrayBuffer(4);
  const worker = new Worker(SENDER, {
    eval: true,
    execArgv: [],
    env: { ...process.env, OTEL_SDK_DISABLED: 'true' },
    workerData: { url, headers: { ...headers, 'content-type': 'application/x-protobuf' }, body, done },
  });
  worker.unref();
  return Atomics.wait(new Int32Array(done), 0, 0, timeoutMs) !== 'timed-out';
}
