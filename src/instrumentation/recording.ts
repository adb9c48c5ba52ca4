import { trace } from '@opentelemetry/api';
import type { FetchCapture } from './fetch-capture.js';

// What other parts of the process (the runner) need of the recording telemetry.ts started, without
// loading the SDK it starts: the `agl` entry imports the runner and must stay light.

let fetchCapture: FetchCapture | undefined;

/** Makes the process's fetch capture known (telemetry.ts, once it enabled it). */
export function useFetchCapture(capture: FetchCapture | undefined): void {
  fetchCapture = capture;
}

/** Finishes now the LLM spans whose answers are complete: a rollout's spans are sent when it ends. */
export function finishAnsweredCalls(): void {
  fetchCapture?.finishAnsweredCalls();
}

/** The tracer provider the API hands tracers from: its proxy's delegate (a no-op one until an SDK registers). */
export function globalTracerProvider(): unknown {
  const provider = trace.getTracerProvider() as { getDelegate?: () => unknown };
  return provider.getDelegate?.() ?? provider;
}
