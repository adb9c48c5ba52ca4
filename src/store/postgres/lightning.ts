import { NotFoundError } from '../../api/errors.js';
import {
  addSpansInOrder,
  dequeueOne,
  type DequeueOptions,
  type ResourcesQuery,
  type RolloutQuery,
  type StoreStatistics,
  type WorkerQuery,
} from '../../api/lightning-store.js';
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
  type RolloutStatus,
  type RolloutUpdate,
  type Span,
  type SpanQuery,
  type Worker,
} from '../../api/types.js';
import type { ColumnarRows } from '../../otlp/columns.js';
import { StoreEvents, takeOrWait } from '../events.js';
import {
  ATTEMPT_FIELDS,
  querySpanPage,
  RESOURCES_FIELDS,
  ROLLOUT_FIELDS,
  WORKER_FIELDS,
} from '../lightning-queries.js';
import { checkFilterLogic, paginate } from '../paginate.js';
import { spanRows } from '../span-json.js';
import type { LightningFile, ServerLightningStore } from '../server-lightning.js';
import { PgDatabase, type PostgresOptions } from './database.js';
import {
  ATTEMPT_COLUMNS,
  RESOURCES_COLUMNS,
  ROLLOUT_COLUMNS,
  rolloutOf,
  WORKER_COLUMNS,
  type RolloutRow,
} from './entities.js';
import { EventListener, EventSender } from './listener.js';
import { operate, type Operation } from './operate.js';
import { StateReplica } from './replica.js';
import { migrate } from './schema.js';
import { nextSequenceId, SpanArrivals } from './spans.js';
import { latestResources, type Signals } from './state-rows.js';
import type { LoadSpec } from './load.js';
import { watchdogRound } from './watchdog.js';

/** What the store needs of this server's DuckDB file: the spans, and the copy of the state. */

/** Watchdog rounds run at most this often before a call (and on a timer in the server). */
const WATCHDOG_INTERVAL_MS = 100;
/** A long poll looks again at least this often while no notification can arrive. */
const UNLISTENED_POLL_MS = 500;
/** waitForRollouts looks at the statuses at most this often. */
const WAIT_LOOK_MS = 50;

/**
 * The LightningStore with its state in PostgreSQL, shared by every `agl serve` that names the
 * same database: rollouts, attempts, resources, workers, the queue and the span sequence
 * counters. Each operation is one transaction that locks what it changes and runs the embedded
 * store's status machine (RolloutState) on it (operate.ts); dequeues take queued rollouts with
 * FOR UPDATE SKIP LOCKED, so no two runners get the same one. Long polls wake on NOTIFY from
 * any server. Spans stay in this server's DuckDB file.
 */
export class PostgresLightningStore implements ServerLightningStore {
  readonly backend = 'postgres';
  /** Rollouts joined the queue (dequeues wait for this), and rollouts finished (waitForRollouts). */
  private readonly queued = new StoreEvents();
  private readonly finished = new StoreEvents();
  private readonly listener: EventListener;
  private readonly sender: EventSender;
  /** Span requests, numbered and heartbeaten a group at a time. */
  private readonly arrivals: SpanArrivals;
  private readonly startedAt = Date.now() / 1000;
  private lastWatchdog = 0;
  private watchdogRunning: Promise<void> | null = null;

  private constructor(
    private readonly db: PgDatabase,
    private readonly file: LightningFile,
    private readonly replica: StateReplica,
  ) {
    this.listener = new EventListener(db, { queued: this.queued, finished: this.finished });
    this.sender = new EventSender(db);
    this.arrivals = new SpanArrivals(db, (signals) => this.signal(signals));
  }

  /**
   * Connects, creates or migrates the schema, and starts listening for other servers' events.
   * `replicaHorizon` answers how far the file's copy of this database's state reached (0: none yet).
   */
  static async open(
    url: string,
    file: LightningFile,
    replicaHorizon: (instanceId: string) => Promise<bigint>,
    options: PostgresOptions = {},
  ): Promise<PostgresLightningStore> {
    const db = new PgDatabase(url, options);
    try {
      const instanceId = await migrate(db);
      const replica = new StateReplica(db, instanceId, await replicaHorizon(instanceId), (rows) => file.write(rows));
      const store = new PostgresLightningStore(db, file, replica);
      await store.listener.start();
      return store;
    } catch (error) {
      await db.close();
      throw error;
    }
  }

  /**
   * Why PostgreSQL could not be reached last, or that the connection that listens for other
   * servers' events is down (null: both are well; health says 'degraded' otherwise).
   */
  get failure(): string | null {
    if (this.db.failure !== null) return this.db.failure;
    return this.listener.listening
      ? null
      : "the PostgreSQL state's LISTEN connection is down: long polls look every 0.5 s until it is back";
  }

  async close(): Promise<void> {
    await this.listener.close();
    await this.watchdogRunning?.catch(() => {});
    await this.sender.drain();
    await this.db.close();
  }

  enqueueRollout(request: RolloutRequest): Promise<Rollout> {
    return this.enqueueManyRollouts([request]).then(([rollout]) => rollout);
  }

  enqueueManyRollouts(requests: RolloutRequest[]): Promise<Rollout[]> {
    // Rollouts named by id are read (and locked) first: an enqueue retried answers them as they are.
    const named = requests.flatMap((r) => (r.rollout_id ? [r.rollout_id] : []));
    return this.change({ latestResources: true, rollouts: named }, (state, now, changes) =>
      state.enqueue(requests, now, changes),
    );
  }

  dequeueRollout(options: DequeueOptions = {}): Promise<AttemptedRollout | null> {
    return dequeueOne(this, options);
  }

  async dequeueManyRollouts(options: DequeueOptions & { limit?: number } = {}): Promise<AttemptedRollout[]> {
    const limit = options.limit ?? 1;
    if (limit <= 0) return [];
    const deadline = Date.now() + (options.waitSeconds ?? 0) * 1000;
    return takeOrWait(
      this.queued,
      deadline,
      () =>
        this.change({ queue: limit, workers: [options.workerId] }, (state, now, changes) =>
          state.dequeue(limit, options.workerId ?? null, now, changes),
        ),
      { wait: (until) => this.nextEvent(this.queued, until), signal: options.signal },
    );
  }

  startRollout(request: RolloutRequest & { worker_id?: string | null }): Promise<AttemptedRollout> {
    const named = request.rollout_id ? [request.rollout_id] : [];
    return this.change(
      { latestResources: true, rollouts: named, workers: [request.worker_id] },
      (state, now, changes) => state.startRollout(request, request.worker_id ?? null, now, changes),
    );
  }

  startAttempt(
    rolloutId: string,
    workerId: string | null = null,
    attemptId?: string | null,
  ): Promise<AttemptedRollout> {
    return this.change({ rollouts: [rolloutId], workers: [workerId] }, (state, now, changes) =>
      state.startAttempt(rolloutId, workerId, now, changes, attemptId),
    );
  }

  async queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    await this.watchdogIfDue();
    const { where, values } = whereOf(
      [
        ['status = ANY($::text[])', query.status_in],
        ['rollout_id = ANY($::text[])', query.rollout_id_in],
        ['strpos(rollout_id, $::text) > 0', query.rollout_id_contains],
        ['mode = ANY($::text[])', query.mode_in],
        // json keeps the text it was given: JSON.stringify's, as the embedded store searches.
        ['strpos(input::text, $::text) > 0', query.input_contains],
      ],
      query.filter_logic,
    );
    const rows = await this.db.query<RolloutRow>(
      `SELECT ${ROLLOUT_COLUMNS} FROM agl.rollouts ${where} ORDER BY created`,
      values,
    );
    const latest = new Map(rows.map((r) => [r.rollout_id, r.latest_attempt_id]));
    const page = paginate(rows.map(rolloutOf), query, ROLLOUT_FIELDS);
    return { ...page, items: await this.withLatestAttempts(page.items, latest) };
  }

  async getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    await this.watchdogIfDue();
    const [row] = await this.db.query<RolloutRow>(`SELECT ${ROLLOUT_COLUMNS} FROM agl.rollouts WHERE rollout_id = $1`, [
      rolloutId,
    ]);
    if (!row) return null;
    const [withAttempt] = await this.withLatestAttempts(
      [rolloutOf(row)],
      new Map([[rolloutId, row.latest_attempt_id]]),
    );
    return withAttempt;
  }

  async queryAttempts(rolloutId: string, query: Pagination = {}): Promise<PaginatedResult<Attempt>> {
    await this.watchdogIfDue();
    const attempts = await this.db.query<Attempt>(
      `SELECT ${ATTEMPT_COLUMNS} FROM agl.attempts WHERE rollout_id = $1 ORDER BY sequence_id`,
      [rolloutId],
    );
    return paginate(attempts, { sort_by: 'sequence_id', ...query }, ATTEMPT_FIELDS);
  }

  async getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    await this.watchdogIfDue();
    const [attempt] = await this.db.query<Attempt>(
      `SELECT ${ATTEMPT_COLUMNS} FROM agl.attempts WHERE rollout_id = $1 ORDER BY sequence_id DESC LIMIT 1`,
      [rolloutId],
    );
    return attempt ?? null;
  }

  updateRollout(rolloutId: string, update: RolloutUpdate): Promise<Rollout> {
    return this.change({ rollouts: [rolloutId] }, (state, now, changes) =>
      state.updateRollout(rolloutId, update, now, changes),
    );
  }

  updateAttempt(rolloutId: string, attemptId: string, update: AttemptUpdate): Promise<Attempt> {
    return this.change({ rollouts: [rolloutId], workers: [update.worker_id] }, (state, now, changes) =>
      state.updateAttempt(rolloutId, attemptId, update, now, changes),
    );
  }

  async waitForRollouts(rolloutIds: string[], timeoutSeconds: number | null): Promise<Rollout[]> {
    const deadline = timeoutSeconds === null ? Infinity : Date.now() + Math.max(0, timeoutSeconds) * 1000;
    // As the embedded store waits: each look reads the rollouts not seen finished yet, and all
    // of them once none of those is left unfinished. A look reads statuses only, and looks are
    // WAIT_LOOK_MS apart at least: a burst of completions costs one.
    let waiting = rolloutIds;
    for (;;) {
      const seen = this.finished.count;
      const lookedAt = Date.now();
      await this.watchdogIfDue();
      let statuses = await this.statusesOf(waiting);
      waiting = waiting.filter((id) => unfinished(statuses.get(id)));
      if (waiting.every((id) => !statuses.has(id))) {
        statuses = await this.statusesOf(rolloutIds);
        waiting = rolloutIds.filter((id) => unfinished(statuses.get(id)));
      }
      if (waiting.every((id) => !statuses.has(id)) || Date.now() >= deadline) {
        const all = await this.rolloutsByIds(rolloutIds);
        return rolloutIds
          .map((id) => all.get(id))
          .filter((r): r is Rollout => r !== undefined && FINISHED_ROLLOUT_STATUSES.includes(r.status));
      }
      // Wake for a finished rollout, and at the watchdog's pace for timeouts it may find.
      if (this.finished.count === seen) await this.nextEvent(this.finished, Math.min(deadline, Date.now() + 1000));
      const pause = lookedAt + WAIT_LOOK_MS - Date.now();
      if (pause > 0 && Date.now() + pause < deadline) await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  addResources(resources: NamedResources): Promise<ResourcesUpdate> {
    return this.change({}, (state, now, changes) => state.addResources(resources, now, changes));
  }

  updateResources(resourcesId: string, resources: NamedResources): Promise<ResourcesUpdate> {
    return this.change({ resources: resourcesId }, (state, now, changes) =>
      state.updateResources(resourcesId, resources, now, changes),
    );
  }

  async getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    await this.watchdogIfDue();
    const [found] = await this.db.query<ResourcesUpdate>(
      `SELECT ${RESOURCES_COLUMNS} FROM agl.resources WHERE resources_id = $1`,
      [resourcesId],
    );
    return found ?? null;
  }

  async getLatestResources(): Promise<ResourcesUpdate | null> {
    await this.watchdogIfDue();
    return (await latestResources(this.db))[0] ?? null;
  }

  async queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    await this.watchdogIfDue();
    const found = await this.db.query<ResourcesUpdate>(
      `SELECT ${RESOURCES_COLUMNS} FROM agl.resources
        WHERE ($1::text IS NULL OR resources_id = $1) AND ($2::text IS NULL OR strpos(resources_id, $2) > 0)
        ORDER BY created`,
      [query.resources_id ?? null, query.resources_id_contains ?? null],
    );
    return paginate(found, query, RESOURCES_FIELDS);
  }

  getNextSpanSequenceId(rolloutId: string): Promise<number> {
    return nextSequenceId(this.db, rolloutId);
  }

  async addSpan(span: Span): Promise<Span | null> {
    const [known] = await this.db.query<{ rollout: boolean; attempt: boolean }>(
      `SELECT EXISTS (SELECT FROM agl.rollouts WHERE rollout_id = $1) AS rollout,
        EXISTS (SELECT FROM agl.attempts WHERE rollout_id = $1 AND attempt_id = $2) AS attempt`,
      [span.rollout_id, span.attempt_id],
    );
    if (!known.rollout) throw new NotFoundError(`no rollout ${span.rollout_id}`);
    if (!known.attempt) throw new NotFoundError(`rollout ${span.rollout_id} has no attempt ${span.attempt_id}`);
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
      async (rolloutId) => (await this.getLatestAttempt(rolloutId))?.attempt_id ?? null,
      (sql) => this.file.querySpanRows(sql),
    );
  }

  async queryWorkers(query: WorkerQuery = {}): Promise<PaginatedResult<Worker>> {
    await this.watchdogIfDue();
    const { where, values } = whereOf(
      [
        ['status = ANY($::text[])', query.status_in],
        ['strpos(worker_id, $::text) > 0', query.worker_id_contains],
      ],
      query.filter_logic,
    );
    const found = await this.db.query<Worker>(
      `SELECT ${WORKER_COLUMNS} FROM agl.workers ${where} ORDER BY created`,
      values,
    );
    return paginate(found, query, WORKER_FIELDS);
  }

  async getWorkerById(workerId: string): Promise<Worker | null> {
    await this.watchdogIfDue();
    const [found] = await this.db.query<Worker>(`SELECT ${WORKER_COLUMNS} FROM agl.workers WHERE worker_id = $1`, [
      workerId,
    ]);
    return found ?? null;
  }

  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker> {
    return this.change({ workers: [workerId] }, (state, now, changes) =>
      state.updateWorker(workerId, heartbeatStats, now, changes),
    );
  }

  async statistics(): Promise<StoreStatistics> {
    await this.watchdogIfDue();
    const [counts] = await this.db.query<Record<string, string>>(
      `SELECT (SELECT count(*) FROM agl.rollouts) AS rollouts, (SELECT count(*) FROM agl.attempts) AS attempts,
        (SELECT count(*) FROM agl.resources) AS resources, (SELECT count(*) FROM agl.workers) AS workers`,
    );
    return {
      name: 'PostgresStore',
      total_rollouts: Number(counts.rollouts),
      total_attempts: Number(counts.attempts),
      total_spans: await this.file.spanCount(),
      total_resources: Number(counts.resources),
      total_workers: Number(counts.workers),
      uptime: Date.now() / 1000 - this.startedAt,
    };
  }

  /**
   * Spans about to be stored: those without a sequence id get theirs from the shared counters,
   * and each counts as a heartbeat of its attempt (spans.ts).
   */
  spansArriving(rows: ColumnarRows): Promise<void> {
    return this.arrivals.arrive(rows);
  }

  /** Brings this server's DuckDB copy of the state up to date (before a SQL read). */
  syncReplica(): Promise<void> {
    return this.replica.sync();
  }

  /** Runs a watchdog round now (the server's timer calls this). */
  async watchdog(): Promise<void> {
    this.lastWatchdog = 0;
    await this.watchdogIfDue();
  }

  /**
   * Runs a watchdog round when the last began over WATCHDOG_INTERVAL_MS ago, and waits for the
   * round in progress if there is one: no call reads a status the watchdog is about to change.
   */
  private watchdogIfDue(): Promise<void> {
    if (!this.watchdogRunning && Date.now() - this.lastWatchdog >= WATCHDOG_INTERVAL_MS) {
      this.lastWatchdog = Date.now();
      this.watchdogRunning = watchdogRound(this.db)
        .then((signals) => this.signal(signals))
        .finally(() => (this.watchdogRunning = null));
    }
    return this.watchdogRunning ?? Promise.resolve();
  }

  /** Runs an operation (after the watchdog, when due) and wakes this server's waiters for what it signalled. */
  private async change<T>(load: LoadSpec, operation: Operation<T>): Promise<T> {
    await this.watchdogIfDue();
    const { value, signals } = await operate(this.db, load, operation);
    this.signal(signals);
    return value;
  }

  /** Wakes this server's waiters at once, and other servers' by a NOTIFY. */
  private signal(signals: Signals | null): void {
    if (signals?.queued) {
      this.queued.wake();
      this.sender.send('queued');
    }
    if (signals?.finished) {
      this.finished.wake();
      this.sender.send('finished');
    }
  }

  /** The next event of `events` or the deadline; sooner while no notification can arrive. */
  private nextEvent(events: StoreEvents, deadline: number): Promise<void> {
    return events.next(this.listener.listening ? deadline : Math.min(deadline, Date.now() + UNLISTENED_POLL_MS));
  }

  private async statusesOf(ids: string[]): Promise<Map<string, RolloutStatus>> {
    const rows = await this.db.query<{ rollout_id: string; status: RolloutStatus }>(
      'SELECT rollout_id, status FROM agl.rollouts WHERE rollout_id = ANY($1)',
      [ids],
    );
    return new Map(rows.map((r) => [r.rollout_id, r.status]));
  }

  private async rolloutsByIds(ids: string[]): Promise<Map<string, Rollout>> {
    const rows = await this.db.query<RolloutRow>(
      `SELECT ${ROLLOUT_COLUMNS} FROM agl.rollouts WHERE rollout_id = ANY($1)`,
      [ids],
    );
    return new Map(rows.map((r) => [r.rollout_id, rolloutOf(r)]));
  }

  /** The rollouts, each with its latest attempt when it has one. */
  private async withLatestAttempts(
    rollouts: Rollout[],
    latest: Map<string, string | null>,
  ): Promise<(Rollout | AttemptedRollout)[]> {
    const ids = rollouts.map((r) => latest.get(r.rollout_id)).filter((id): id is string => typeof id === 'string');
    const attempts =
      ids.length === 0
        ? []
        : await this.db.query<Attempt>(
            `SELECT ${ATTEMPT_COLUMNS} FROM agl.attempts WHERE rollout_id = ANY($1) AND attempt_id = ANY($2)`,
            [rollouts.map((r) => r.rollout_id), ids],
          );
    const byRollout = new Map(
      attempts.filter((a) => latest.get(a.rollout_id) === a.attempt_id).map((a) => [a.rollout_id, a]),
    );
    return rollouts.map((r) => {
      const attempt = byRollout.get(r.rollout_id);
      return attempt ? { ...r, attempt } : r;
    });
  }
}

/**
 * A WHERE clause of the filters given (`$` stands for the filter's parameter), joined by
 * filter_logic as the embedded store's `matches` joins them; no filter matches everything.
 */
function whereOf(filters: [string, unknown][], logic: 'and' | 'or' | undefined): { where: string; values: unknown[] } {
  checkFilterLogic(logic);
  const values: unknown[] = [];
  const conditions: string[] = [];
  for (const [condition, value] of filters) {
    if (value === undefined) continue;
    values.push(value);
    conditions.push(condition.replace('$', `$${values.length}`));
  }
  const joined = conditions.join(logic === 'or' ? ' OR ' : ' AND ');
  return { where: conditions.length === 0 ? '' : `WHERE ${joined}`, values };
}

const unfinished = (status: RolloutStatus | undefined) =>
  status === undefined || !FINISHED_ROLLOUT_STATUSES.includes(status);
