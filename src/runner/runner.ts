import { randomBytes } from 'node:crypto';
import { gatewayBaseUrl } from '../client/gateway-url.js';
import { StoreUnreachableError } from '../client/store-request.js';
import { emitException, emitReward } from '../instrumentation/emitters.js';
import { finishAnsweredCalls, globalTracerProvider } from '../instrumentation/recording.js';
import { withRollout } from '../instrumentation/rollout-context.js';
import type { LightningStore } from '../api/lightning-store.js';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';
import type { AttemptedRollout, NamedResources, Rollout, Span } from '../api/types.js';
import { rolloutContext, type Agent } from './agent.js';

/** How an attempt ended, as the runner reports it. */
interface AttemptOutcome {
  status: 'succeeded' | 'failed' | 'timeout';
  reward: number | null;
  error?: unknown;
}

/** Called in this order for each rollout: rollout start, trace start, (the agent), trace end, rollout end. */
export interface RunnerHooks {
  onRolloutStart?(rollout: AttemptedRollout): void | Promise<void>;
  /** Inside the rollout's recording scope, right before the agent runs: spans made here are the rollout's. */
  onTraceStart?(rollout: AttemptedRollout): void | Promise<void>;
  /** Still inside the recording scope, once the agent returned or threw (not after a timeout). */
  onTraceEnd?(rollout: AttemptedRollout): void | Promise<void>;
  onRolloutEnd?(rollout: AttemptedRollout, outcome: AttemptOutcome): void | Promise<void>;
}

export interface RunnerOptions<T> {
  readonly store: LightningStore;
  readonly agent: Agent<T>;
  /** Rollouts run at once (default 1). */
  readonly concurrency?: number;
  readonly workerId?: string;
  /** Stop after starting this many rollouts (default: run until stopped). */
  readonly maxRollouts?: number;
  /** The agl server: the agent's `llm` then points at its gateway route for the attempt. */
  readonly gatewayUrl?: string;
  /**
   * The server's token (`agl serve --token`): the agent's `llm.apiKey` on the gateway route,
   * which then requires it (the gateway never sends it upstream).
   */
  readonly gatewayToken?: string;
  /** Attempt and worker heartbeats (default every 10 s). */
  readonly heartbeatSeconds?: number;
  readonly hooks?: RunnerHooks;
  /**
   * What a stop (the run's signal) does to rollouts in flight: `finish` lets them end (default);
   * `abandon` aborts their signals and reports them failed at once, so that the store retries them.
   */
  readonly onStop?: 'finish' | 'abandon';
  /**
   * How long the store may stay away (unreachable, or answering 502/503/504) before the run
   * ends with StoreDowntimeError, counted from the first failed call (default: no limit).
   */
  readonly maxStoreDowntimeSeconds?: number;
}

const FLUSH_MS = 5_000;
/** Waits between tries while the store is away: doubling from 0.5 s up to 10 s. */
const BACKOFF_MS = [500, 1000, 2000, 5000, 10_000];

/** The store stayed away longer than the runner's maxStoreDowntimeSeconds: the run ends with this. */
export class StoreDowntimeError extends Error {
  /** The message of the last failed call. */
  readonly lastFailure: string;

  constructor(
    readonly seconds: number,
    readonly retries: number,
    last: unknown,
  ) {
    const lastFailure = (last as Error)?.message ?? String(last);
    super(
      `the store has been away for ${seconds.toFixed(1)} s (${retries} ${retries === 1 ? 'retry' : 'retries'}), longer than maxStoreDowntimeSeconds allows; the last failure: ${lastFailure}`,
    );
    this.name = 'StoreDowntimeError';
    this.lastFailure = lastFailure;
  }
}

class AttemptTimeoutError extends Error {
  constructor(seconds: number) {
    super(`the rollout ran past its timeout of ${seconds} s`);
    this.name = 'AttemptTimeoutError';
  }
}

class AbandonedError extends Error {
  constructor() {
    super('abandoned: the runner was stopped');
    this.name = 'AbandonedError';
  }
}

/** Sends the spans of a finished rollout before it is reported done, so that whoever waits on it can read them. */
export async function flushSpans(): Promise<void> {
  // A streamed answer's copy is read to its end in the turn after the app's: then its span is finished.
  await new Promise((resolve) => setImmediate(resolve));
  finishAnsweredCalls();
  const provider = globalTracerProvider() as { forceFlush?: () => Promise<void> };
  if (typeof provider.forceFlush !== 'function') return;
  // An export that failed was reported by the exporter itself (telemetry.ts: ReportingExporter).
  await Promise.race([
    provider.forceFlush().catch(() => {}),
    new Promise((resolve) => setTimeout(resolve, FLUSH_MS).unref()),
  ]);
}

/**
 * Takes rollouts from a LightningStore (embedded or over HTTP) and runs the agent on them, up
 * to `concurrency` at once, each inside `withRollout` so that every span it makes is attributed;
 * sends heartbeats and reports each attempt succeeded or failed.
 */
export class Runner<T = unknown> {
  readonly workerId: string;
  private started = 0;

  constructor(private readonly options: RunnerOptions<T>) {
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw new TypeError(`concurrency must be a whole number of at least 1, not ${options.concurrency}`);
    if (options.maxRollouts !== undefined && !(Number.isInteger(options.maxRollouts) && options.maxRollouts >= 0))
      throw new TypeError(`maxRollouts must be a whole number, not ${options.maxRollouts}`);
    if (options.onStop !== undefined && options.onStop !== 'finish' && options.onStop !== 'abandon')
      throw new TypeError(`onStop must be finish or abandon, not "${options.onStop}"`);
    const downtime = options.maxStoreDowntimeSeconds;
    if (downtime !== undefined && !(typeof downtime === 'number' && downtime > 0))
      throw new TypeError(`maxStoreDowntimeSeconds must be a number of seconds above 0, not ${downtime}`);
    this.workerId = options.workerId ?? `runner-${process.pid}-${randomBytes(3).toString('hex')}`;
  }

  /**
   * Runs rollouts until `maxRollouts` were started and finished, or `signal` aborts (in-flight
   * rollouts finish first). Rejects when the store fails in a way retrying will not fix (a 500
   * to a dequeue), or when the store stayed away past maxStoreDowntimeSeconds (StoreDowntimeError),
   * once the other slots stopped as for an abort.
   */
  async run(signal?: AbortSignal): Promise<{ rollouts: number }> {
    const heartbeat = setInterval(
      () =>
        void this.options.store
          .updateWorker(this.workerId, { started: this.started })
          .catch((error) => this.heartbeatFailed(error)),
      this.heartbeatMs(),
    );
    const halt = new AbortController();
    const stop = signal ? AbortSignal.any([signal, halt.signal]) : halt.signal;
    try {
      const slots = await Promise.allSettled(
        Array.from({ length: this.options.concurrency ?? 1 }, () =>
          this.slot(stop).catch((error) => {
            halt.abort(error);
            throw error;
          }),
        ),
      );
      const failed = slots.find((slot) => slot.status === 'rejected');
      if (failed) throw failed.reason;
    } finally {
      clearInterval(heartbeat);
    }
    return { rollouts: this.started };
  }

  /** Runs one task now, outside the queue (for debugging an agent): the rollout as it ended, and its spans. */
  async step(input: T, resources?: NamedResources): Promise<{ rollout: Rollout; spans: Span[] }> {
    const store = this.options.store;
    const resourcesId = resources ? (await store.addResources(resources)).resources_id : undefined;
    const attempted = await store.startRollout({ input, resources_id: resourcesId, worker_id: this.workerId });
    await this.runOne(attempted);
    const rollout = await store.getRolloutById(attempted.rollout_id);
    if (!rollout) throw new Error(`rollout ${attempted.rollout_id} is no longer in the store`);
    const spans = (await store.querySpans({ rollout_id: attempted.rollout_id })).items;
    return { rollout, spans };
  }

  /** Failed store requests since the store last answered (0 while it answers), the client's own retries included. */
  private failures = 0;
  /** When the first of those failed (ms). */
  private awaySince = 0;
  /** A heartbeat failed for a reason other than the store being away (said once). */
  private heartbeatErrorShown = false;

  /**
   * A failed heartbeat is retried by the next one; while the store is away that is all there is
   * to do. Any other failure is a fault (the store answering 500, a bug) and is said once.
   */
  private heartbeatFailed(error: unknown): void {
    if (isTransient(error) || this.heartbeatErrorShown) return;
    this.heartbeatErrorShown = true;
    console.error(
      `agl: runner ${this.workerId}: a heartbeat failed (${(error as Error).message}); further heartbeat errors are not shown`,
    );
  }

  /**
   * A store call failed for now: one line at the first failure of an outage (not one per retry),
   * then a pause that doubles up to 10 s, cut short to try once more when maxStoreDowntimeSeconds
   * runs out; past it, StoreDowntimeError.
   */
  private async storeIsAway(error: unknown, signal?: AbortSignal, maxDelayMs = Infinity): Promise<void> {
    const now = Date.now();
    // The client may have retried the call already: the outage began at its first failure.
    const unreachable = error instanceof StoreUnreachableError ? error : null;
    if (this.failures === 0) {
      this.awaySince = unreachable?.failingSince ?? now;
      console.error(
        `agl: runner ${this.workerId}: the store is away (${(error as Error).message}); retrying with backoff`,
      );
    }
    const limit = this.options.maxStoreDowntimeSeconds;
    const left = limit === undefined ? Infinity : this.awaySince + limit * 1000 - now;
    if (left <= 0) throw new StoreDowntimeError((now - this.awaySince) / 1000, this.failures, error);
    const delay = Math.min(left, maxDelayMs, BACKOFF_MS[Math.min(this.failures, BACKOFF_MS.length - 1)]);
    this.failures += unreachable?.tries ?? 1;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delay);
      signal?.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  /** The store answered: the outage's second line, with its retries and length. */
  private storeIsBack(): void {
    if (this.failures === 0) return;
    const seconds = (Date.now() - this.awaySince) / 1000;
    console.error(
      `agl: runner ${this.workerId}: the store answers again after ${seconds.toFixed(1)} s and ${this.failures} ${this.failures === 1 ? 'retry' : 'retries'}`,
    );
    this.failures = 0;
  }

  /**
   * A store call that must happen (an attempt's outcome): retried while the store is away, until
   * `patienceMs` passed, and at least every third of it. A store that answers 503 (its state,
   * PostgreSQL, is out of reach) is waited for beyond that: no server can mark the attempt
   * unresponsive while the state is away, and silence counts from its return (watchdog.ts).
   */
  private async persist<R>(call: () => Promise<R>, patienceMs: number): Promise<R> {
    const deadline = Date.now() + patienceMs;
    for (;;) {
      try {
        const result = await call();
        this.storeIsBack();
        return result;
      } catch (error) {
        if (!isTransient(error) || (Date.now() >= deadline && !stateIsAway(error))) throw error;
        await this.storeIsAway(error, undefined, patienceMs / 3);
      }
    }
  }

  private heartbeatMs(): number {
    return 1000 * (this.options.heartbeatSeconds ?? 10);
  }

  private async slot(signal?: AbortSignal): Promise<void> {
    const max = this.options.maxRollouts;
    while (!signal?.aborted && (max === undefined || this.started < max)) {
      this.started++; // reserved before the dequeue, so that slots never start more than max
      let next: AttemptedRollout | null;
      try {
        next = await this.options.store.dequeueRollout({ workerId: this.workerId, waitSeconds: 1, signal });
        this.storeIsBack();
      } catch (error) {
        this.started--;
        if (!isTransient(error)) throw error;
        await this.storeIsAway(error, signal);
        continue;
      }
      if (!next) {
        this.started--;
        continue;
      }
      await this.runOne(next, signal);
    }
  }

  /** Runs one attempt: its heartbeats, the agent until it ends or a cutoff comes, its spans sent, its outcome reported. */
  private async runOne(attempted: AttemptedRollout, stop?: AbortSignal): Promise<void> {
    const abort = new AbortController();
    const onStop = () => abort.abort(stop?.reason);
    stop?.addEventListener('abort', onStop, { once: true });
    const heartbeat = this.attemptHeartbeat(attempted);
    const cutoffs = this.cutoffs(attempted, abort, stop);
    let outcome: AttemptOutcome;
    try {
      outcome = await this.attempt(attempted, abort.signal, cutoffs.reached);
    } finally {
      cutoffs.clear();
      clearInterval(heartbeat);
      stop?.removeEventListener('abort', onStop);
    }
    await flushSpans();
    await this.report(attempted, outcome);
    await this.options.hooks?.onRolloutEnd?.(attempted, outcome);
  }

  /** The attempt's heartbeats: often enough that the store never takes a live attempt for unresponsive. */
  private attemptHeartbeat(attempted: AttemptedRollout): NodeJS.Timeout {
    const { rollout_id: rolloutId, attempt } = attempted;
    const unresponsiveMs = 1000 * (attempted.config?.unresponsive_seconds ?? Infinity);
    const beat = () =>
      void this.options.store
        .updateAttempt(rolloutId, attempt.attempt_id, { last_heartbeat_time: Date.now() / 1000 })
        .catch((error) => this.heartbeatFailed(error));
    return setInterval(beat, Math.min(this.heartbeatMs(), unresponsiveMs / 3));
  }

  /**
   * The ways the runner stops waiting for the agent, each a promise that rejects when it comes:
   * the rollout's timeout, counted from the attempt's start (an agent that hangs past it is
   * abandoned, its signal aborted, and its slot freed), and a stop with onStop abandon. `clear`
   * stops the timeout's timer.
   */
  private cutoffs(
    attempted: AttemptedRollout,
    abort: AbortController,
    stop?: AbortSignal,
  ): { reached: Promise<never>[]; clear(): void } {
    const timeoutSeconds = attempted.config?.timeout_seconds ?? null;
    let timer: NodeJS.Timeout | undefined;
    const reached: Promise<never>[] = [];
    if (timeoutSeconds !== null) {
      reached.push(
        new Promise<never>((_, reject) => {
          const left = Math.max(0, (attempted.attempt.start_time + timeoutSeconds) * 1000 - Date.now());
          timer = setTimeout(() => {
            abort.abort(new AttemptTimeoutError(timeoutSeconds));
            reject(new AttemptTimeoutError(timeoutSeconds));
          }, left);
        }),
      );
    }
    if (this.options.onStop === 'abandon' && stop) {
      reached.push(
        new Promise<never>((_, reject) => {
          if (stop.aborted) reject(new AbandonedError());
          else stop.addEventListener('abort', () => reject(new AbandonedError()), { once: true });
        }),
      );
    }
    // A cutoff may come before the race in attempt() listens (a stop while the attempt is marked
    // running). The race hears the rejection; this only keeps it from being reported as unhandled.
    for (const cutoff of reached) cutoff.catch(() => {});
    return { reached, clear: () => clearTimeout(timer) };
  }

  /**
   * Marks the attempt running and runs the agent inside the rollout's recording scope until it
   * returns, throws or a cutoff comes: how the attempt ended (its reward and failure recorded).
   */
  private async attempt(
    attempted: AttemptedRollout,
    signal: AbortSignal,
    cutoffs: Promise<never>[],
  ): Promise<AttemptOutcome> {
    const { store, agent, hooks, gatewayUrl, gatewayToken } = this.options;
    const rolloutId = attempted.rollout_id;
    const attemptId = attempted.attempt.attempt_id;
    const scope = { rollout_id: rolloutId, attempt_id: attemptId };
    /** From here on a failure is the agent's (or its timeout), which the attempt's status tells. */
    let agentStarted = false;
    try {
      // Running from now on; the heartbeats keep it so (and say so once the store is back, if it
      // is away now). Any other failure fails the attempt.
      await store
        .updateAttempt(rolloutId, attemptId, { status: 'running', last_heartbeat_time: Date.now() / 1000 })
        .catch((error) => {
          if (!isTransient(error)) throw error;
        });
      await hooks?.onRolloutStart?.(attempted);
      const resources = attempted.resources_id
        ? ((await store.getResourcesById(attempted.resources_id))?.resources ?? {})
        : {};
      const context = rolloutContext(
        { rolloutId, attemptId, mode: attempted.mode ?? null },
        resources,
        signal,
        gatewayUrl ? { baseURL: gatewayBaseUrl(gatewayUrl, rolloutId, attemptId), apiKey: gatewayToken } : undefined,
      );
      const running = withRollout(scope, async () => {
        await hooks?.onTraceStart?.(attempted);
        try {
          return await agent.run(attempted.input as T, context);
        } finally {
          await hooks?.onTraceEnd?.(attempted);
        }
      });
      running.catch(() => {}); // an abandoned agent's late failure is nobody's to hear
      agentStarted = true;
      const result = await (cutoffs.length ? Promise.race([running, ...cutoffs]) : running);
      if (result !== undefined && (typeof result !== 'number' || !Number.isFinite(result))) {
        throw new TypeError(
          `the agent returned ${typeof result === 'number' ? result : typeof result}; it returns its reward as a finite number, or nothing`,
        );
      }
      if (typeof result === 'number') withRollout(scope, () => emitReward(result));
      return { status: 'succeeded', reward: typeof result === 'number' ? result : null };
    } catch (error) {
      withRollout(scope, () => emitException(error instanceof Error ? error : new Error(String(error))));
      if (!agentStarted)
        console.error(
          `agl: runner ${this.workerId}: rollout ${rolloutId} failed before its agent ran: ${(error as Error)?.message ?? String(error)}`,
        );
      return { status: error instanceof AttemptTimeoutError ? 'timeout' : 'failed', reward: null, error };
    }
  }

  /**
   * Reports the attempt's outcome, its result: kept trying while the store is away (a restart),
   * for as long as the store itself would wait for the attempt before calling it unresponsive
   * (2 minutes when it would wait forever).
   */
  private async report(attempted: AttemptedRollout, outcome: AttemptOutcome): Promise<void> {
    const rolloutId = attempted.rollout_id;
    const attemptId = attempted.attempt.attempt_id;
    const metadata =
      outcome.error === undefined
        ? undefined
        : { error: outcome.error instanceof Error ? outcome.error.message : String(outcome.error) };
    const patience = 1000 * (attempted.config?.unresponsive_seconds ?? 120);
    try {
      await this.persist(
        () =>
          this.options.store.updateAttempt(rolloutId, attemptId, {
            status: outcome.status,
            ...(metadata ? { metadata } : {}),
          }),
        patience,
      );
    } catch (error) {
      if (error instanceof StoreDowntimeError) throw error;
      console.error(
        `agl: runner ${this.workerId}: could not report attempt ${attemptId} of ${rolloutId}: ${(error as Error).message}`,
      );
    }
  }
}

/** The store answered that it cannot reach its state now (503): it is there, and will be again. */
function stateIsAway(error: unknown): boolean {
  return error instanceof StoreUnreachableError && error.status === 503;
}

/**
 * A store call that failed for now and may succeed later: the store did not answer, or said it
 * is unavailable (502/503/504), busy or unable to write. Anything else (a 500, a refusal, a bug
 * in the runner's own plumbing) retrying would only hide.
 */
function isTransient(error: unknown): boolean {
  return (
    error instanceof StoreUnreachableError || error instanceof StoreBusyError || error instanceof StoreUnavailableError
  );
}
