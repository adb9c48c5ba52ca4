import { randomBytes } from 'node:crypto';
import type { QuerySource } from '../../adapters/source.js';
import { allRows } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { Attempt, AttemptStatus, Span } from '../../api/types.js';

/**
 * What an algorithm records about its own run, through the LightningStore interface alone: the
 * run is a rollout of its own (mode NULL, `metadata.agl_algorithm` naming the algorithm, never
 * queued, so no runner takes it), and each thing the algorithm decides is a span of that rollout,
 * named `agl.<algorithm>.<what>` with flat `agl.<algorithm>.*` attributes. SQL views read the
 * spans (prompt_versions for APO, sft_iterations for SFT; docs/sql.md); a resumed run is a new
 * attempt of the same rollout, so every session of a run is kept and told apart.
 */

/** A span attribute of a run's event; null and undefined ones are left out. */
export type RunAttribute = string | number | boolean | readonly string[] | null | undefined;

/** When an event happened, if it took time (default: now), and whether it failed. */
interface EventSpan {
  /** Seconds since the epoch. */
  readonly startTime?: number;
  readonly endTime?: number;
  /** What went wrong: the span's status is ERROR with this description. */
  readonly error?: string;
}

export class AlgorithmRun {
  private readonly traceId = randomBytes(16).toString('hex');

  private constructor(
    private readonly store: LightningStore,
    readonly runId: string,
    readonly attemptId: string,
    /** 1 for a run's first session, 2 after its first resume ... */
    readonly session: number,
  ) {}

  /** A new run: `input` says what it was asked to do (its options), for whoever reads the rollout. */
  static async start(
    store: LightningStore,
    algorithm: string,
    input: unknown,
    resourcesId?: string,
  ): Promise<AlgorithmRun> {
    const started = await store.startRollout({
      input,
      mode: null,
      resources_id: resourcesId ?? null,
      metadata: { agl_algorithm: algorithm },
    });
    return AlgorithmRun.running(store, started.rollout_id, started.attempt);
  }

  /** A new session of an earlier run, after an interruption. */
  static async resume(store: LightningStore, runId: string): Promise<AlgorithmRun> {
    const started = await store.startAttempt(runId);
    return AlgorithmRun.running(store, runId, started.attempt);
  }

  /** The session, marked running: the run reads so in `rollouts` until it ends, not only from its first span on. */
  private static async running(store: LightningStore, runId: string, attempt: Attempt): Promise<AlgorithmRun> {
    await store.updateAttempt(runId, attempt.attempt_id, { status: 'running' });
    return new AlgorithmRun(store, runId, attempt.attempt_id, attempt.sequence_id);
  }

  /** The id of the latest run of `algorithm` in the store, or null. */
  static async latest(source: QuerySource, algorithm: string): Promise<string | null> {
    const rows = await allRows(
      source,
      `SELECT rollout_id FROM rollouts WHERE (metadata->>'agl_algorithm') = '${algorithm.replaceAll("'", "''")}' ORDER BY start_time DESC LIMIT 1`,
    );
    return rows.length ? String(rows[0].rollout_id) : null;
  }

  /** The rollouts the run has enqueued, in all its sessions (`metadata.agl_run`). */
  async rollouts(source: QuerySource): Promise<number> {
    const rows = await allRows(
      source,
      `SELECT count(*)::INTEGER AS n FROM rollouts WHERE (metadata->>'agl_run') = '${this.runId}'`,
    );
    return Number(rows[0]?.n ?? 0);
  }

  /** Records one event of the run as a span named `name`. */
  async record(name: string, attributes: Record<string, RunAttribute>, event: EventSpan = {}): Promise<void> {
    const now = Date.now() / 1000;
    const spanId = randomBytes(8).toString('hex');
    const context = { trace_id: this.traceId, span_id: spanId, is_remote: false, trace_state: {} };
    const span: Span = {
      rollout_id: this.runId,
      attempt_id: this.attemptId,
      sequence_id: await this.store.getNextSpanSequenceId(this.runId, this.attemptId),
      trace_id: this.traceId,
      span_id: spanId,
      parent_id: null,
      name,
      status:
        event.error === undefined
          ? { status_code: 'OK', description: null }
          : { status_code: 'ERROR', description: event.error },
      attributes: Object.fromEntries(
        Object.entries(attributes).filter(([, value]) => value !== null && value !== undefined),
      ),
      events: [],
      links: [],
      start_time: event.startTime ?? now,
      end_time: event.endTime ?? now,
      context,
      parent: null,
      resource: { attributes: { 'service.name': 'agl-algorithm' }, schema_url: '' },
    };
    await this.store.addSpan(span);
  }

  /** The spans named `name` of every session of this run, in the order they were recorded. */
  async read(name: string): Promise<Span[]> {
    const { items } = await this.store.querySpans({
      rollout_id: this.runId,
      name,
      sort_by: 'sequence_id',
      sort_order: 'asc',
      limit: -1,
    });
    return items;
  }

  /** Ends this session: `succeeded` (done), `cancelled` (stopped; resumable) or `failed`. */
  async end(status: Extract<AttemptStatus, 'succeeded' | 'cancelled' | 'failed'>): Promise<void> {
    await this.store.updateAttempt(this.runId, this.attemptId, { status });
  }
}
