import { AsyncLocalStorage } from 'node:async_hooks';
import type { Context } from '@opentelemetry/api';
import type { ReadableSpan, Span, SpanProcessor } from '@opentelemetry/sdk-trace';
import { ATTR } from '../api/semconv.js';

/** The rollout and attempt that spans created in a scope belong to. */
export interface RolloutScope {
  readonly rollout_id: string;
  readonly attempt_id?: string;
}

// One store per process, on a global symbol: `agl/register` and the app's own `import 'agl'`
// may load this module from different paths and must still see the same scope.
const STORE = Symbol.for('agl.rollout-scope');
const globals = globalThis as { [STORE]?: AsyncLocalStorage<RolloutScope> };
globals[STORE] ??= new AsyncLocalStorage<RolloutScope>();
const storage = globals[STORE];

/**
 * Runs `fn` so that every span created inside it, across awaits, belongs to `scope`'s rollout:
 * how one process runs many rollouts at once.
 */
export function withRollout<T>(scope: RolloutScope, fn: () => T): T {
  if (typeof scope?.rollout_id !== 'string' || scope.rollout_id === '') {
    throw new TypeError('withRollout needs {rollout_id: string, attempt_id?: string}');
  }
  if (scope.attempt_id !== undefined && typeof scope.attempt_id !== 'string') {
    throw new TypeError('withRollout: attempt_id must be a string');
  }
  return storage.run({ rollout_id: scope.rollout_id, attempt_id: scope.attempt_id }, fn);
}

/** The scope of the running code, if any. */
export function currentRollout(): RolloutScope | undefined {
  return storage.getStore();
}

/** Stamps the current rollout scope on every span as it starts (span attributes win over resource ones). */
export class RolloutSpanProcessor implements SpanProcessor {
  onStart(span: Span, _parentContext: Context): void {
    const scope = storage.getStore();
    if (!scope) return;
    span.setAttribute(ATTR.rolloutId, scope.rollout_id);
    if (scope.attempt_id !== undefined) span.setAttribute(ATTR.attemptId, scope.attempt_id);
  }
  onEnd(_span: ReadableSpan): void {}
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}
