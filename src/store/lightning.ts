import {
  addSpansInOrder,
  dequeueOne,
  type DequeueOptions,
  type ResourcesQuery,
  type RolloutQuery,
  type StoreStatistics,
  type WorkerQuery,
} from '../api/lightning-store.js';
import {
  FINISHED_ROLLOUT_STATUSES,
  type Attempt,
  type AttemptedRollout,
  type AttemptUpdate,
  type NamedResources,
  type PaginatedResult,
  type Pagination,
  type ResourcesUpdate,
  type Rollout,
  type RolloutRequest,
  type RolloutUpdate,
  type Span,
  type SpanQuery,
  type Worker,
} from '../api/types.js';
import { checkFilterLogic, matches, paginate } from './paginate.js';
import { NotFoundError, StoreUnavailableError } from '../api/errors.js';
import { changedAnything, noChanges, type RolloutState, type Changes } from './rollout-state.js';
import { spanRows } from './span-json.js';
import { ATTEMPT_FIELDS, querySpanPage, RESOURCES_FIELDS, ROLLOUT_FIELDS, WORKER_FIELDS } from './lightning-queries.js';
import { StoreEvents, takeOrWait } from './events.js';
import { historyRows } from './rollout-tables.js';
import {
  onlyUnfinished,
  rolloutPageSql,
  storedRollout,
  storedRollouts,
  storedRolloutsSql,
  type StoredRollout,
} from './stored-rollouts.js';
import type { SequenceIds } from './sequence-ids.js';
import type { TableRows } from './writer.js';
import type { LightningFile, ServerLightningStore } from './server-lightning.js';

/** What the embedded LightningStore needs beside the file: the state kept in it. */
interface EmbeddedState {
  /** The span sequence counters, ingest's, which stored spans continue. */
  readonly sequences: SequenceIds;
  /**
   * Loads `state` again from the database once every write queued so far has settled (nothing
   * else is written meanwhile); resolves to the highest version written.
   */
  reloadState(state: RolloutState): Promise<number>;
  /** The rows of a read of the database (the state's history), all of them. */
  readState(sql: string): Promise<Record<string, unknown>[]>;
  /** Finished rollouts held in memory; older ones are read from the database (RolloutState.retire). */
  readonly finishedInMemory: number;
}

/**
 * A rollout input's JSON text, for `input_contains`: kept per input object (an update of the input
 * is a new object), so that filtering 100,000 rollouts does not serialize each of them each time.
 */
const inputTexts = new WeakMap<object, string>();
function inputText(input: unknown): string {
  if (input === null || typeof input !== 'object') return JSON.stringify(input) ?? '';
  let text = inputTexts.get(input);
  if (text === undefined) {
    text = JSON.stringify(input);
    inputTexts.set(input, text);
  }
  return text;
}

/** Watchdog scans run at most this often before a call (and on a timer in the server). */
const WATCHDOG_INTERVAL_SECONDS = 0.1;

/**
 * The LightningStore of the embedded DuckDB store. State lives in memory (RolloutState) and
 * every change is written through to DuckDB before the call resolves, in the writer's group
 * commits. Long polls wait on events of the state, not on the database. Finished rollouts beyond
 * the 1,000 that changed last (`finishedInMemory`) live in the database only: reads of them go
 * there, and a change takes the rollout back into memory first.
 *
 * A change counts only once its write succeeded. When a write fails (or an operation fails
 * part-way), the state is loaded again from the database, where the failed change is not: an
 * undo of the one change would not do, since later changes, applied while its write was in
 * flight, may have built on it and been committed. Changes and reads wait for the reload.
 */
export class EmbeddedLightningStore implements ServerLightningStore {
  private readonly events = new StoreEvents();
  private lastWatchdog = 0;
  private readonly startedAt = Date.now() / 1000;
  /** Version of the last history row written (continued from the database on load). */
  private version = 0;
  /** The reload of the state after a failed write, while it runs. */
  private reloading: Promise<void> | null = null;
  /** The last reload failed: the state may hold changes that the database does not. */
  private stale = false;

  constructor(
    private readonly state: RolloutState,
    private readonly file: LightningFile,
    private readonly kept: EmbeddedState,
  ) {
    state.onFinished = () => this.events.wake();
    state.onQueued = () => this.events.wake();
  }

  async enqueueRollout(request: RolloutRequest): Promise<Rollout> {
    return (await this.enqueueManyRollouts([request]))[0];
  }

  async enqueueManyRollouts(requests: RolloutRequest[]): Promise<Rollout[]> {
    // A retried enqueue answers the rollout it made, which may live in the database only.
    await this.restore(requests.flatMap((r) => (r.rollout_id ? [r.rollout_id] : [])));
    return this.change((now, changes) => this.state.enqueue(requests, now, changes));
  }

  dequeueRollout(options: DequeueOptions = {}): Promise<AttemptedRollout | null> {
    return dequeueOne(this, options);
  }

  async dequeueManyRollouts(options: DequeueOptions & { limit?: number } = {}): Promise<AttemptedRollout[]> {
    const limit = options.limit ?? 1;
    if (limit <= 0) return [];
    const deadline = Date.now() + (options.waitSeconds ?? 0) * 1000;
    return takeOrWait(
      this.events,
      deadline,
      () => this.change((now, changes) => this.state.dequeue(limit, options.workerId ?? null, now, changes)),
      { signal: options.signal },
    );
  }

  async startRollout(request: RolloutRequest & { worker_id?: string | null }): Promise<AttemptedRollout> {
    if (request.rollout_id) await this.restore([request.rollout_id]);
    return this.change((now, changes) => this.state.startRollout(request, request.worker_id ?? null, now, changes));
  }

  async startAttempt(
    rolloutId: string,
    workerId: string | null = null,
    attemptId?: string | null,
  ): Promise<AttemptedRollout> {
    await this.restore([rolloutId]);
    return this.change((now, changes) => this.state.startAttempt(rolloutId, workerId, now, changes, attemptId));
  }

  async queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    await this.watchdogIfDue();
    const ids = query.rollout_id_in === undefined ? null : new Set(query.rollout_id_in);
    const statuses = query.status_in === undefined ? null : new Set(query.status_in);
    const modes = query.mode_in === undefined ? null : new Set<string | null>(query.mode_in);
    const { rollout_id_contains: idText, input_contains: inputPart } = query;
    // The filters asked for, each once per rollout (no list of results per rollout: 100,000 of them).
    const conditions: ((r: Rollout) => boolean)[] = [];
    if (statuses) conditions.push((r) => statuses.has(r.status));
    if (ids) conditions.push((r) => ids.has(r.rollout_id));
    if (idText !== undefined) conditions.push((r) => r.rollout_id.includes(idText));
    if (modes) conditions.push((r) => modes.has(r.mode));
    if (inputPart !== undefined) conditions.push((r) => inputText(r.input).includes(inputPart));
    checkFilterLogic(query.filter_logic);
    const all = [...this.state.rollouts.values()];
    const found =
      conditions.length === 0
        ? all
        : all.filter(
            query.filter_logic === 'or'
              ? (r) => conditions.some((matches) => matches(r))
              : (r) => conditions.every((matches) => matches(r)),
          );
    const page =
      this.state.retired.rollouts === 0 || onlyUnfinished(query)
        ? paginate(found, query, ROLLOUT_FIELDS)
        : this.heldPage(found, query, conditions.length);
    if (page === null) return this.queryStoredRollouts(query);
    return structuredClone({ ...page, items: page.items.map((r) => this.state.withLatestAttempt(r)) });
  }

  /**
   * A page of a query that may match rollouts held only in the file, answered from memory where
   * the order puts all of those on one side of the page, or null. Two such queries come often:
   * the newest rollouts, unfiltered (the dashboard's first page: held while the page's oldest
   * started after every rollout let go of), and the finished ones by end (Agent Lightning v1's
   * terminal cursor: every rollout let go of ended before every match held, and the cursor has
   * read past them).
   */
  private heldPage(found: Rollout[], query: RolloutQuery, filters: number): PaginatedResult<Rollout> | null {
    const { retired } = this.state;
    if (filters === 0 && query.sort_by === 'start_time' && query.sort_order === 'desc') {
      const page = paginate(found, query, ROLLOUT_FIELDS);
      const last = page.items.at(-1);
      if (page.limit < 0 || page.items.length < page.limit || !last || !(last.start_time > retired.newestStart))
        return null;
      return { ...page, total: page.total + retired.rollouts };
    }
    const offset = query.offset ?? 0;
    const allFinished = FINISHED_ROLLOUT_STATUSES.every((s) => query.status_in?.includes(s));
    if (filters === 1 && allFinished && query.sort_by === 'end_time' && query.sort_order !== 'desc') {
      if (offset < retired.rollouts || !found.every((r) => (r.end_time ?? Infinity) > retired.latestEnd)) return null;
      const page = paginate(found, { ...query, offset: offset - retired.rollouts }, ROLLOUT_FIELDS);
      return { ...page, offset, total: page.total + retired.rollouts };
    }
    return null;
  }

  async getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    await this.watchdogIfDue();
    const rollout = this.state.rollouts.get(rolloutId);
    if (rollout) return structuredClone(this.state.withLatestAttempt(rollout));
    const stored = (await this.stored([rolloutId])).get(rolloutId);
    return stored ? withLatestOf(stored) : null;
  }

  async queryAttempts(rolloutId: string, query: Pagination = {}): Promise<PaginatedResult<Attempt>> {
    await this.watchdogIfDue();
    const attempts = this.state.rollouts.has(rolloutId)
      ? structuredClone(this.state.attempts.get(rolloutId) ?? [])
      : ((await this.stored([rolloutId])).get(rolloutId)?.attempts ?? []);
    return paginate(attempts, { sort_by: 'sequence_id', ...query }, ATTEMPT_FIELDS);
  }

  async getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    await this.watchdogIfDue();
    if (this.state.rollouts.has(rolloutId)) return structuredClone(this.state.latestAttempt(rolloutId));
    return (await this.stored([rolloutId])).get(rolloutId)?.attempts.at(-1) ?? null;
  }

  async updateRollout(rolloutId: string, update: RolloutUpdate): Promise<Rollout> {
    await this.restore([rolloutId]);
    return this.change((now, changes) => this.state.updateRollout(rolloutId, update, now, changes));
  }

  async updateAttempt(rolloutId: string, attemptId: string, update: AttemptUpdate): Promise<Attempt> {
    await this.restore([rolloutId]);
    return this.change((now, changes) => this.state.updateAttempt(rolloutId, attemptId, update, now, changes));
  }

  async waitForRollouts(rolloutIds: string[], timeoutSeconds: number | null): Promise<Rollout[]> {
    const deadline = timeoutSeconds === null ? Infinity : Date.now() + Math.max(0, timeoutSeconds) * 1000;
    // Unknown ids hold no wait: they are left out of the answer.
    const pending = (id: string) => {
      const rollout = this.state.rollouts.get(id);
      return rollout !== undefined && !FINISHED_ROLLOUT_STATUSES.includes(rollout.status);
    };
    // Each wake looks on from the first rollout not seen finished, up to one that is pending:
    // rollouts mostly finish in the order they were asked for, an algorithm waits for
    // thousands, and every change wakes it (a filter of those left, per wake, was 2% of an
    // in-process Trainer's CPU). At the end of the list, all of them once more.
    let next = 0;
    for (;;) {
      const seen = this.events.count;
      await this.watchdogIfDue();
      while (next < rolloutIds.length && !pending(rolloutIds[next])) next++;
      if (next === rolloutIds.length) {
        const again = rolloutIds.findIndex(pending);
        if (again !== -1) next = again;
      }
      if (next === rolloutIds.length || Date.now() >= deadline) {
        // Those the memory lets go of are finished, in the database.
        const stored = await this.stored(
          rolloutIds.filter((id) => !this.state.rollouts.has(id)),
          false,
        );
        const known = rolloutIds
          .map((id) => this.state.rollouts.get(id) ?? stored.get(id)?.rollout)
          .filter((r): r is Rollout => r !== undefined);
        return structuredClone(known.filter((r) => FINISHED_ROLLOUT_STATUSES.includes(r.status)));
      }
      // Wake for a finished rollout, and at the watchdog's pace for timeouts it may find.
      if (this.events.count === seen) await this.events.next(Math.min(deadline, Date.now() + 1000));
    }
  }

  addResources(resources: NamedResources): Promise<ResourcesUpdate> {
    return this.change((now, changes) => this.state.addResources(resources, now, changes));
  }

  updateResources(resourcesId: string, resources: NamedResources): Promise<ResourcesUpdate> {
    return this.change((now, changes) => this.state.updateResources(resourcesId, resources, now, changes));
  }

  async getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    await this.watchdogIfDue();
    return structuredClone(this.state.resources.get(resourcesId) ?? null);
  }

  async getLatestResources(): Promise<ResourcesUpdate | null> {
    await this.watchdogIfDue();
    return structuredClone(this.state.latestResources());
  }

  async queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    await this.watchdogIfDue();
    const found = [...this.state.resources.values()].filter(
      (r) =>
        (query.resources_id === undefined || r.resources_id === query.resources_id) &&
        (query.resources_id_contains === undefined || r.resources_id.includes(query.resources_id_contains)),
    );
    return structuredClone(paginate(found, query, RESOURCES_FIELDS));
  }

  async getNextSpanSequenceId(rolloutId: string): Promise<number> {
    await this.kept.sequences.prepare([rolloutId]);
    return this.kept.sequences.next(rolloutId);
  }

  async addSpan(span: Span): Promise<Span | null> {
    await this.restore([span.rollout_id]);
    this.assertAttempt(span.rollout_id, span.attempt_id);
    const { stored } = await this.file.writeSpans(spanRows(span));
    return stored === 1 ? span : null;
  }

  addManySpans(spans: Span[]): Promise<Span[]> {
    return addSpansInOrder(this, spans);
  }

  async querySpans(query: SpanQuery): Promise<PaginatedResult<Span>> {
    await this.watchdogIfDue();
    return querySpanPage(
      query,
      async (rolloutId) => this.state.latestAttempt(rolloutId)?.attempt_id ?? null,
      (sql) => this.file.querySpanRows(sql),
    );
  }

  async queryWorkers(query: WorkerQuery = {}): Promise<PaginatedResult<Worker>> {
    await this.watchdogIfDue();
    const statuses = query.status_in === undefined ? null : new Set(query.status_in);
    const found = [...this.state.workers.values()].filter((w) => {
      const conditions: boolean[] = [];
      if (statuses) conditions.push(statuses.has(w.status));
      if (query.worker_id_contains !== undefined) conditions.push(w.worker_id.includes(query.worker_id_contains));
      return matches(conditions, query.filter_logic);
    });
    return structuredClone(paginate(found, query, WORKER_FIELDS));
  }

  async getWorkerById(workerId: string): Promise<Worker | null> {
    await this.watchdogIfDue();
    return structuredClone(this.state.workers.get(workerId) ?? null);
  }

  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker> {
    return this.change((now, changes) => this.state.updateWorker(workerId, heartbeatStats, now, changes));
  }

  async statistics(): Promise<StoreStatistics> {
    await this.watchdogIfDue();
    let attempts = 0;
    for (const list of this.state.attempts.values()) attempts += list.length;
    return {
      name: 'DuckDBStore',
      total_rollouts: this.state.rollouts.size + this.state.retired.rollouts,
      total_attempts: attempts + this.state.retired.attempts,
      total_spans: await this.file.spanCount(),
      total_resources: this.state.resources.size,
      total_workers: this.state.workers.size,
      uptime: Date.now() / 1000 - this.startedAt,
    };
  }

  /** The rows that persist `changes` (history tables), for the writer. */
  stateRows(changes: Changes): TableRows[] {
    return historyRows(changes, () => ++this.version);
  }

  private assertAttempt(rolloutId: string, attemptId: string): void {
    this.state.rollout(rolloutId);
    if (!this.state.attempts.get(rolloutId)?.some((a) => a.attempt_id === attemptId)) {
      throw new NotFoundError(`rollout ${rolloutId} has no attempt ${attemptId}`);
    }
  }

  /** Runs the watchdog now and writes what it changed (the server's timer calls this). */
  async watchdog(): Promise<void> {
    this.lastWatchdog = 0;
    await this.watchdogIfDue();
  }

  /**
   * Applies `operation` to the state, then resolves with a copy of its result once its changes
   * are committed. The watchdog runs first when due, so no call sees a stale status.
   */
  private async change<T>(operation: (now: number, changes: Changes) => T): Promise<T> {
    const outcome = await this.apply(
      (now, changes): { value: T } | { refused: NotFoundError } => {
        this.runWatchdog(now, changes);
        try {
          // A copy: callers must not see (or make) later changes of the live state.
          return { value: structuredClone(operation(now, changes)) };
        } catch (error) {
          // Refused before it changed anything: what the watchdog changed is still written.
          if (error instanceof NotFoundError) return { refused: error };
          throw error;
        }
      },
      (rows) => this.file.write(rows),
    );
    if ('refused' in outcome) throw outcome.refused;
    return outcome.value;
  }

  private async watchdogIfDue(): Promise<void> {
    await this.apply(
      (now, changes) => this.runWatchdog(now, changes),
      (rows) => (rows.length > 0 ? this.file.write(rows) : Promise.resolve()),
    );
  }

  /**
   * Applies `operation` to the state (synchronously, so it is atomic) and resolves with its
   * result once `write` stored the rows of its changes. When the operation throws, or the write
   * fails, after the state changed, the state is loaded again from the database before the
   * error is passed on. The store's span writes come this way too: each span is a heartbeat.
   */
  async apply<T>(
    operation: (now: number, changes: Changes, state: RolloutState) => T,
    write: (rows: TableRows[]) => Promise<void>,
  ): Promise<T> {
    // Checked again after each wait: a write that failed meanwhile may have started a reload.
    while (this.reloading || this.stale) await this.reloaded();
    const changes = noChanges();
    const now = Date.now() / 1000;
    try {
      const result = operation(now, changes, this.state);
      for (const id of changes.freshRolloutIds) this.kept.sequences.begin(id);
      await write(this.stateRows(changes));
      this.state.heartbeatsStored(changes, now);
      // Let go of finished rollouts in steps of an eighth, not one at every change.
      const keep = this.kept.finishedInMemory;
      if (this.state.finishedHeld > keep + Math.floor(keep / 8)) this.state.retire(keep);
      return result;
    } catch (error) {
      if (changedAnything(changes)) await this.reload();
      throw error;
    }
  }

  /** Loads the state from the database (when the store opens). */
  async load(): Promise<void> {
    this.version = await this.kept.reloadState(this.state);
  }

  /** Waits for a reload in progress; tries again after one that failed (and throws if it fails again). */
  private async reloaded(): Promise<void> {
    if (this.reloading) return this.reloading;
    await this.reload();
    if (this.stale)
      throw new StoreUnavailableError('it could not load its rollout state from the database after a failed write');
  }

  /** Loads the state from the database (once for all the failures that ask meanwhile). */
  private reload(): Promise<void> {
    this.reloading ??= this.kept
      .reloadState(this.state)
      .then(
        (version) => {
          this.version = version;
          this.stale = false;
          // The watchdog's work of the failed change is undone too: it runs again at the next call.
          this.lastWatchdog = 0;
          this.events.wake();
        },
        (error) => {
          this.stale = true;
          console.error(
            `agl: loading the rollout state after a failed write failed (retried at the next call): ${(error as Error).message}`,
          );
        },
      )
      .finally(() => (this.reloading = null));
    return this.reloading;
  }

  /**
   * The rollouts `ids` that only the database holds, as it holds them, with their attempts unless
   * `attempts` is false (none while nothing is retired).
   */
  private async stored(ids: readonly string[], attempts = true): Promise<Map<string, StoredRollout>> {
    if (ids.length === 0 || this.state.retired.rollouts === 0) return new Map();
    return storedRollouts(await this.kept.readState(storedRolloutsSql(ids, attempts)));
  }

  /** Takes the rollouts `ids` back into memory where only the database holds them, before a change. */
  private async restore(ids: readonly string[]): Promise<void> {
    const stored = await this.stored(ids.filter((id) => !this.state.rollouts.has(id)));
    for (const { rollout, attempts } of stored.values()) this.state.restore(rollout, attempts);
  }

  /**
   * `queryRollouts` over every stored rollout, once some live in the database only: SQL filters,
   * sorts and pages them; a rollout held in memory is answered as memory holds it.
   */
  private async queryStoredRollouts(query: RolloutQuery): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    // Checks the paging as in memory (an empty list pages nothing but is checked alike).
    const { limit, offset } = paginate([], query, ROLLOUT_FIELDS);
    const sql = rolloutPageSql(query);
    const [rows, total] = await Promise.all([
      this.kept.readState(sql.page),
      sql.total === null
        ? this.state.rollouts.size + this.state.retired.rollouts
        : this.kept.readState(sql.total).then(([row]) => Number(row.total)),
    ]);
    const rollouts = rows.map(({ data }) => storedRollout(JSON.parse(String(data))));
    const stored = await this.stored(rollouts.map((r) => r.rollout_id).filter((id) => !this.state.rollouts.has(id)));
    const items = rollouts.map((r) => {
      const held = this.state.rollouts.get(r.rollout_id);
      if (held) return structuredClone(this.state.withLatestAttempt(held));
      const found = stored.get(r.rollout_id);
      return found ? withLatestOf(found) : r;
    });
    return { items, limit, offset, total };
  }

  private runWatchdog(now: number, changes: Changes): void {
    if (now - this.lastWatchdog < WATCHDOG_INTERVAL_SECONDS) return;
    this.lastWatchdog = now;
    this.state.watchdog(now, changes);
  }
}

/** The shape GET rollouts/{id} answers, for a rollout read from the database. */
function withLatestOf({ rollout, attempts }: StoredRollout): Rollout | AttemptedRollout {
  const attempt = attempts.at(-1);
  return attempt ? { ...rollout, attempt } : rollout;
}
