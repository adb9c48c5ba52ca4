import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import type { BatchSink } from '../otlp/batch.js';
import { selectRows, type ColumnarRows, type Int64Column } from '../otlp/columns.js';
import type { ExportFormat, QueryResult } from '../api/query.js';
import { exportQuery, runQuery, streamQuery } from './query.js';
import { deriveSpans } from './deriver.js';
import { migrate } from './schema.js';
import { SpanKeyIndex, spanKey } from './span-keys.js';
import { LOG_COLUMNS, SPAN, SPAN_COLUMNS } from '../otlp/span-columns.js';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';
import { GroupCommitWriter, writeError, type TableRows } from './writer.js';
import { WriteBudget } from './write-budget.js';
import { EmbeddedLightningStore } from './lightning.js';
import { RolloutState, type Changes } from './rollout-state.js';
import { loadRolloutState, stateSource } from './rollout-tables.js';
import type { PostgresLightningStore } from './postgres/lightning.js';
import {
  FLEET_SEARCH_PATH,
  fleetViewsSql,
  MOVED_LOGS,
  MOVED_SPANS,
  type MovedTable,
  nextCommitSeqSql,
} from './fleet-views.js';
import { hasSpanFiles, type MoveHooks, SERVER_ID, type MoveSink, TableMover, type SpanMoveLag } from './span-files.js';
import { WATERMARK } from './derived.js';
import { sqlText } from './sql.js';

/** WAL size above which the store checkpoints while idle. */
const IDLE_CHECKPOINT_BYTES = 16 * 2 ** 20;

/** The write budget when the options give none (write-budget.ts). */
export const DEFAULT_WRITE_MEMORY_BYTES = 64 * 2 ** 20;
/** Decoded bytes that may wait for a commit when the options give no maxQueuedBytes. */
export const DEFAULT_MAX_QUEUED_BYTES = 64 * 2 ** 20;
/** A query's time limit when the options give no queryTimeoutMs. */
export const DEFAULT_QUERY_TIMEOUT_MS = 30_000;

/** Spans one round of the deriver covers. */
const DERIVE_ROUND_SPANS = 20_000;
/** The longest a few spans wait for the deriver while the store is idle. */
const DERIVE_EVERY_MS = 5_000;
/** How often spans move to the span directory when the options do not say (spansMoveEveryMs). */
export const DEFAULT_SPANS_MOVE_EVERY_MS = 10_000;
/** Spans one Parquet file of a move holds at most. */
const SPANS_MOVE_BATCH_ROWS = 200_000;

/** Where the LightningStore's state lives: in the DuckDB file, or in PostgreSQL shared by servers. */
export type StateBackend = 'duckdb' | 'postgres';

/** What GET /v1/agl/health answers. */
export type StoreHealth = (
  | { status: 'ok'; backend: StateBackend }
  | { status: 'degraded'; backend: StateBackend; reason: string }
) & { spanMove?: SpanMoveLag };

export interface WriteResult {
  /** Rows now durable in the database. */
  readonly stored: number;
  /** Spans dropped because the store already holds an identical one. */
  readonly duplicates: number;
}

export interface StoreOptions {
  /** The DuckDB file; created on first use. */
  readonly path: string;
  /** Decoded bytes that may wait for a commit before writes get StoreBusyError (default 64 MiB). */
  readonly maxQueuedBytes?: number;
  /** Time limit of one query (default 30 s; Infinity for none). */
  readonly queryTimeoutMs?: number;
  /** Rows one query may return as JSON (default 100,000); exports to files have no limit. */
  readonly maxQueryRows?: number;
  /**
   * WAL size at which DuckDB checkpoints during writes (DuckDB setting; default 1GB). The store
   * checkpoints by itself while idle (see `deriveWhenIdleMs`), so this is the bound under
   * sustained ingest, and the most a restart after a crash replays.
   */
  readonly checkpointThreshold?: string;
  /**
   * How long no span may have been written before the store's idle work runs by itself: a
   * checkpoint of a WAL over 16 MB, else the deriver (default 250 ms; Infinity: only
   * `deriveAll()` derives, and DuckDB checkpoints at `checkpointThreshold`).
   */
  readonly deriveWhenIdleMs?: number;
  /**
   * Memory that committed rows not yet checkpointed may hold while writes run (default 64 MiB);
   * more waits in DuckDB's temporary folder beside the file until the next checkpoint (see
   * write-budget.ts). Reads run with DuckDB's default limit.
   */
  readonly writeMemoryBytes?: number;
  /**
   * Request bytes from which a group's COMMIT runs with DuckDB's default memory limit rather than
   * under the write budget (default: a quarter of writeMemoryBytes; see the writer's option).
   */
  readonly commitWithMoreMemoryBytes?: number;
  /** Open for queries only (another process may not hold the file for writing meanwhile). */
  readonly readOnly?: boolean;
  /**
   * A PostgreSQL URL (postgres://user@host/db): the LightningStore's state (rollouts, attempts,
   * resources, workers, the queue, the span sequence counters) lives there, shared by every
   * server that names it (store/postgres/). Spans stay in this file, which keeps a copy of the
   * state for SQL. Absent: the state lives in this file.
   */
  readonly state?: string;
  /** Connections to PostgreSQL this server may hold (default 16). */
  readonly stateConnections?: number;
  /**
   * A directory shared by servers: spans move there as Parquet files, and every read (the views
   * of the schema `fleet`) sees every server's (span-files.ts, fleet-views.ts).
   */
  readonly spansDir?: string;
  /** Reads the span directory without moving this file's spans there (agl query|export --spans-dir). */
  readonly spansDirReadOnly?: boolean;
  /** This server's name in the span directory (default: a random id kept in the file). */
  readonly serverId?: string;
  /** How often spans move to the span directory (default 10 s; Infinity: on `moveSpans()` and close only). */
  readonly spansMoveEveryMs?: number;
}

/**
 * The embedded store: one DuckDB file, one writer connection with group commit, a fresh
 * connection per read. Hot state (span identities for de-duplication, per-rollout sequence
 * counters) lives in memory and is rebuilt from the file on open.
 */
export class DuckDBStore implements BatchSink {
  private readonly sequences = new Map<string, number>();
  private readonly spanKeys = new SpanKeyIndex();
  /** Span rows accepted but not yet committed. */
  private readonly pendingSpans = new Set<ColumnarRows>();
  private writer: GroupCommitWriter;
  /** Why the last write failed for the disk's or the file's sake (null: the last write succeeded). */
  private writeFailure: string | null = null;
  /** DuckDB invalidated the database: the next write opens it again first (see `reopen`). */
  private invalidated = false;
  private reopening: Promise<void> | null = null;
  /** The watchdog's failure was said (it runs every second: said once). */
  private watchdogErrorShown = false;
  /** The rollout queue, attempts, resources and workers kept in this file (Agent Lightning's LightningStore). */
  private readonly embedded: EmbeddedLightningStore;
  /** The same kept in PostgreSQL, when the options name a database (then `embedded` is unused). */
  private shared: PostgresLightningStore | null = null;
  private watchdogTimer: NodeJS.Timeout | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  /** The idle checkpoint, or the check for one, in progress. */
  private idleStep: Promise<void> | null = null;
  /** The deriver's round, or a delete of moved spans, in progress (see derived.ts). */
  private deriving: Promise<unknown> | null = null;
  private lastSpanWrite = 0;
  /** Spans committed since the last derive round began, and when it began. */
  private spansSinceRound = 0;
  private lastRoundStart = 0;
  /** The last round stopped at its size, so more spans wait (on open: what the file holds may). */
  private roundWasFull = true;
  private deriveConnection: DuckDBConnection | undefined;
  /** What DuckDB may use while writes run (none for a read-only store). */
  private budget: WriteBudget | undefined;
  private closing = false;
  private closed: Promise<void> | null = null;
  /** Move spans and log records to the span directory (spansDir), and the move in progress. */
  private mover: TableMover | undefined;
  private logMover: TableMover | undefined;
  private moving: Promise<number> | null = null;
  private moveTimer: NodeJS.Timeout | undefined;
  /** Set with a span directory: reads resolve names in its schema first (fleet-views.ts). */
  private readSearchPath: string | undefined;
  /** This file's name in the span directory. */
  private serverId = '';

  private constructor(
    readonly path: string,
    private instance: DuckDBInstance,
    private connection: DuckDBConnection,
    private readonly options: StoreOptions,
  ) {
    this.writer = this.newWriter();
    this.embedded = new EmbeddedLightningStore(new RolloutState(), {
      write: (writes) => this.write(writes, 0),
      writeSpans: (rows) => this.writeSpans(rows, 0),
      querySpanRows: async (sql) => (await this.ownQuery(sql)).rows,
      spanCount: () => this.spanCount(),
      nextSequenceId: (rolloutId) => this.nextSequenceId(rolloutId),
      reloadState: async (state) => {
        // After DuckDB invalidated the database, the reload is what opens it again: the writes
        // that would do so wait for the reload.
        await this.ensureOpen();
        let version = 0;
        await this.writer.between(async (connection) => {
          version = await this.read(() => loadRolloutState(connection, state));
        });
        return version;
      },
    });
  }

  /** The LightningStore (Agent Lightning's): in this file, or in PostgreSQL (`state`). */
  get lightning(): EmbeddedLightningStore | PostgresLightningStore {
    return this.shared ?? this.embedded;
  }

  private newWriter(): GroupCommitWriter {
    return new GroupCommitWriter(this.connection, {
      maxQueuedBytes: this.options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES,
      counters: { spans: { nextSql: nextCommitSeqSql('spans') }, logs: { nextSql: nextCommitSeqSql('logs') } },
      withMoreMemory: (work) => this.read(work),
      // A quarter of the budget: a COMMIT under the budget failed for memory from 70% of it.
      commitWithMoreMemoryBytes:
        this.options.commitWithMoreMemoryBytes ?? (this.options.writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES) / 4,
    });
  }

  static async open(options: StoreOptions): Promise<DuckDBStore> {
    const instance = await DuckDBInstance.create(options.path, instanceSettings(options));
    let opening: DuckDBStore | undefined;
    try {
      const connection = await instance.connect();
      const store = new DuckDBStore(options.path, instance, connection, options);
      opening = store;
      if (options.readOnly) {
        // A file served with a span directory reads every server's spans, as its server does.
        const fleet = await connection.runAndReadAll("SELECT 1 FROM duckdb_schemas() WHERE schema_name = 'fleet'");
        if (fleet.currentRowCount > 0) store.readSearchPath = FLEET_SEARCH_PATH;
      } else {
        await migrate(connection);
        if (options.spansDir !== undefined) await store.openSpansDir(options.spansDir);
        await store.loadHotState();
        await store.openState();
        store.budget = await WriteBudget.open(
          await instance.connect(),
          options.writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES,
        );
        store.startMovingSpans();
        // Attempts time out even when nobody asks (and restarts resolve attempts left running).
        store.watchdogTimer = setInterval(
          () => void store.lightning.watchdog().catch((error) => store.watchdogFailed(error)),
          1000,
        );
        store.watchdogTimer.unref();
        // While no span has been written for a moment, the WAL is checkpointed into the file
        // (which frees the memory the WAL's rows hold) and the spans derived (derived.ts), so
        // that ingest waits for neither; reads are complete meanwhile.
        const idleMs = options.deriveWhenIdleMs ?? 250;
        if (Number.isFinite(idleMs))
          store.idleTimer = setInterval(() => {
            void store.budget?.settle();
            if (store.deriving || store.idleStep || Date.now() - store.lastSpanWrite < idleMs) return;
            store.idleStep = store
              .checkpointIfLarge()
              .then((checkpointed) => {
                if (checkpointed || store.closing || !store.deriveDue()) return;
                store.deriveRound(DERIVE_ROUND_SPANS).catch((error) => {
                  // Reads stay complete (the views derive what is missing); retried after the next write.
                  store.roundWasFull = false;
                  console.error(
                    `agl: deriving the stored spans failed (queries stay complete, only slower): ${(error as Error).message}`,
                  );
                });
              })
              .finally(() => (store.idleStep = null));
          }, idleMs);
        store.idleTimer?.unref();
      }
      return store;
    } catch (error) {
      await opening?.shared?.close();
      instance.closeSync();
      throw error;
    }
  }

  /**
   * Loads the state kept in this file, or connects to PostgreSQL's (`state`). A file keeps one
   * kind for good: its own state, or a copy of one database's (stateSource).
   */
  private async openState(): Promise<void> {
    const held = await stateSource(this.connection);
    if (!this.options.state) {
      if (held.source !== null)
        throw new Error(
          `${this.path} holds a copy of the state kept in PostgreSQL; serve it with --state and that database`,
        );
      return this.embedded.load();
    }
    if (held.ownRows)
      throw new Error(
        `${this.path} holds rollouts of its own (served without --state); give servers with --state a new --db file`,
      );
    const { PostgresLightningStore } = await import('./postgres/lightning.js');
    this.shared = await PostgresLightningStore.open(
      this.options.state,
      {
        writeSpans: (rows) => this.writeSpans(rows, 0),
        querySpanRows: async (sql) => (await this.ownQuery(sql)).rows,
        spanCount: () => this.spanCount(),
        write: (rows) => this.write(rows, 0),
        replicaHorizon: async (instanceId) => {
          if (held.source !== null && held.source !== instanceId)
            throw new Error(`${this.path} holds a copy of the state of another PostgreSQL database (${held.source})`);
          return held.xmin;
        },
      },
      { maxConnections: this.options.stateConnections },
    );
  }

  /**
   * Defines the schema `fleet` over the span directory and reads through it; unless the store
   * only reads the directory, readies the move of this file's spans (span-files.ts). Before any
   * timer: a directory that cannot be written fails the open with nothing running.
   */
  private async openSpansDir(dir: string): Promise<void> {
    const serverId = this.options.serverId ?? (await this.persistedServerId());
    if (!SERVER_ID.test(serverId))
      throw new Error(`a server id is letters, digits, '.', '_' or '-', not "${serverId}"`);
    this.serverId = serverId;
    if (this.options.spansDirReadOnly) {
      if (!(await hasSpanFiles(dir))) throw new Error(`no span files in ${dir} (agl serve --spans-dir writes them)`);
    } else {
      // Spans move once derived: a file holds what the deriver made of them (fleet-views.ts).
      const derived = async () => {
        await this.deriveAll();
        return Number((await this.ownQuery(`SELECT ${WATERMARK} AS n`)).rows[0].n);
      };
      this.mover = await TableMover.open(
        dir,
        serverId,
        MOVED_SPANS,
        this.moveSink(MOVED_SPANS, derived),
        SPANS_MOVE_BATCH_ROWS,
      );
      const logSink = this.moveSink(MOVED_LOGS, () => logSink.lastCommitted());
      this.logMover = await TableMover.open(dir, serverId, MOVED_LOGS, logSink, SPANS_MOVE_BATCH_ROWS);
    }
    const connection = await this.instance.connect();
    try {
      await connection.run(fleetViewsSql(dir, serverId));
    } finally {
      connection.closeSync();
    }
    this.readSearchPath = FLEET_SEARCH_PATH;
  }

  /** What a mover of `kind` needs of the store; it may move rows through `movableThrough`. */
  private moveSink(kind: MovedTable, movableThrough: () => Promise<number>): MoveSink {
    return {
      lastCommitted: async () =>
        Number((await this.ownQuery(`SELECT coalesce(max(commit_seq), -1) AS n FROM main.${kind.table}`)).rows[0].n),
      movableThrough,
      copyToParquet: (sql, path) =>
        this.read(() =>
          exportQuery(this.instance, sql, path, 'parquet', { timeoutMs: Number.POSITIVE_INFINITY, guard: false }),
        ),
      // On the deriver's connection: a delete of spans changes the derived tables too.
      deleteThrough: (through) =>
        this.onDeriveConnection(undefined, async (connection) => {
          await this.read(() => connection.run(kind.deleteSql(through)));
        }),
    };
  }

  /** Moves spans to the span directory every spansMoveEveryMs (without one: nothing). */
  private startMovingSpans(): void {
    const everyMs = this.options.spansMoveEveryMs ?? DEFAULT_SPANS_MOVE_EVERY_MS;
    const dir = this.options.spansDir;
    if (!this.mover || !Number.isFinite(everyMs)) return;
    this.moveTimer = setInterval(() => {
      if (this.moving || this.closing) return;
      this.moveSpans().catch((error) =>
        console.error(`agl: moving spans to ${dir} failed, retried later: ${(error as Error).message}`),
      );
    }, everyMs);
    this.moveTimer.unref();
  }

  /** This file's server id in the span directory: made once, then kept in agl_meta. */
  private async persistedServerId(): Promise<string> {
    const made = `agl-${randomBytes(6).toString('hex')}`;
    await this.connection.run("INSERT OR IGNORE INTO agl_meta VALUES ('server_id', $made)", { made });
    const reader = await this.connection.runAndReadAll("SELECT value FROM agl_meta WHERE key = 'server_id'");
    return String(reader.getRows()[0][0]);
  }

  /**
   * Moves every span committed so far to the span directory, batch after batch, after the move
   * in progress, then the log records; returns how many spans it moved (0 without spansDir).
   * Tests cut a move of spans off with hooks.
   */
  moveSpans(hooks: MoveHooks = {}): Promise<number> {
    const mover = this.mover;
    if (!mover) return Promise.resolve(0);
    const move = (this.moving ?? Promise.resolve(0))
      .catch(() => 0)
      .then(async () => {
        const spans = await mover.moveAll(hooks);
        await this.logMover?.moveAll();
        return spans;
      });
    this.moving = move;
    void move
      .finally(() => {
        if (this.moving === move) this.moving = null;
      })
      .catch(() => {});
    return move;
  }

  /** Where the LightningStore's state lives. */
  get backend(): StateBackend {
    return this.shared ? 'postgres' : 'duckdb';
  }

  /**
   * 'degraded' while writes fail for the disk's or the file's sake (disk full, I/O error), with
   * DuckDB's reason, or while PostgreSQL is out of reach; 'ok' again once a write succeeds
   * (clients retry after the 503's Retry-After, and each retry tries again).
   */
  get health(): StoreHealth {
    const reason = this.writeFailure ?? this.shared?.failure ?? null;
    const spanMove = this.mover?.lag;
    return reason === null
      ? { status: 'ok', backend: this.backend, ...(spanMove && { spanMove }) }
      : { status: 'degraded', backend: this.backend, reason, ...(spanMove && { spanMove }) };
  }

  /** True while the write queue is full: new writes would get StoreBusyError. */
  get busy(): boolean {
    return this.writer.full;
  }

  /**
   * Stores spans durably: drops re-delivered ones, gives spans of a rollout without a sequence
   * id the next ids of that rollout (in start-time order), and resolves after the commit.
   */
  async writeSpans(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    if (bytes > 0 && this.writer.full) throw new StoreBusyError(1);
    // Pending before the first await, so that a concurrent write of the same spans sees it.
    this.pendingSpans.add(rows);
    const isNew = new Uint8Array(rows.length);
    try {
      const kept = await this.dropDuplicates(rows, isNew);
      if (this.shared) await this.writeSpansSharedState(this.shared, kept, bytes);
      else await this.writeSpansOwnState(kept, bytes);
      // Counted once committed: a round whose snapshot missed them leaves them counted.
      this.spansSinceRound += kept.length;
      this.mover?.noteCommitted(kept.length);
      return { stored: kept.length, duplicates: rows.length - kept.length };
    } catch (error) {
      const traceIds = rows.columns[SPAN.trace_id] as string[];
      const spanIds = rows.columns[SPAN.span_id] as string[];
      for (let i = 0; i < rows.length; i++) if (isNew[i]) this.spanKeys.remove(traceIds[i], spanIds[i]);
      throw error;
    } finally {
      this.pendingSpans.delete(rows);
    }
  }

  /** Every span is a heartbeat of its attempt, which counts only if the span is stored: one group commit holds both. */
  private async writeSpansOwnState(kept: ColumnarRows, bytes: number): Promise<void> {
    await this.embedded.apply(
      (now, changes, state) => {
        // Refused before the heartbeats, which the writer's refusal would have to undo (a reload).
        if (bytes > 0 && this.writer.full) throw new StoreBusyError(1);
        this.assignSequenceIds(kept);
        this.heartbeats(kept, state, now, changes);
      },
      (state) => {
        this.lastSpanWrite = Date.now();
        return this.write([{ table: 'spans', columns: SPAN_COLUMNS, rows: kept }, ...state], bytes);
      },
    );
  }

  /**
   * With the state in PostgreSQL, sequence ids come from its shared counters and the heartbeats
   * go there before the spans are written: a failure of either leaves nothing stored, and the
   * client's retry does it all again. (A write that fails after them leaves the attempt alive
   * by spans its retry will store.)
   */
  private async writeSpansSharedState(
    shared: PostgresLightningStore,
    kept: ColumnarRows,
    bytes: number,
  ): Promise<void> {
    await shared.spansArriving(kept);
    if (bytes > 0 && this.writer.full) throw new StoreBusyError(1);
    this.lastSpanWrite = Date.now();
    await this.write([{ table: 'spans', columns: SPAN_COLUMNS, rows: kept }], bytes);
  }

  async writeLogs(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    await this.write([{ table: 'logs', columns: LOG_COLUMNS, rows }], bytes);
    return { stored: rows.length, duplicates: 0 };
  }

  /** A SQL query over the file (with the state copied from PostgreSQL up to date first, when it lives there). */
  async query(sql: string, options: { guard?: boolean } = {}): Promise<QueryResult> {
    await this.shared?.syncReplica();
    return this.ownQuery(sql, options.guard ?? true);
  }

  /** A query of the store's own (spans, counts), which needs no copy of the state. */
  private ownQuery(sql: string, guard = false): Promise<QueryResult> {
    return this.read(() =>
      runQuery(this.instance, sql, {
        timeoutMs: this.options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
        maxRows: this.options.maxQueryRows ?? 100_000,
        guard,
        searchPath: this.readSearchPath,
      }),
    );
  }

  private async spanCount(): Promise<number> {
    return Number((await this.ownQuery('SELECT count(*) AS n FROM spans')).rows[0].n);
  }

  /** The rows of a query batch by batch, with no row or time limit (adapters read large results this way). */
  async *streamQuery(sql: string, options: { guard?: boolean } = {}): AsyncGenerator<Record<string, unknown>[]> {
    await this.shared?.syncReplica();
    const endRead = await this.budget?.startRead();
    try {
      yield* streamQuery(this.instance, sql, { guard: options.guard ?? true, searchPath: this.readSearchPath });
    } finally {
      endRead?.();
    }
  }

  /** Writes a query's rows to a file (COPY); returns how many. */
  async exportQuery(
    sql: string,
    path: string,
    format: ExportFormat,
    options: { guard?: boolean; onProgress?: (fraction: number) => void } = {},
  ): Promise<number> {
    await this.shared?.syncReplica();
    return this.read(() =>
      exportQuery(this.instance, sql, path, format, {
        timeoutMs: this.options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
        guard: options.guard ?? true,
        searchPath: this.readSearchPath,
        onProgress: options.onProgress,
      }),
    );
  }

  /** Hands rows to the writer, under the write budget (write-budget.ts). */
  private async write(writes: readonly TableRows[], bytes: number): Promise<void> {
    await this.ensureOpen();
    this.budget?.noteWrite();
    try {
      await this.writer.write(writes, bytes);
      this.writeFailure = null;
    } catch (error) {
      if (error instanceof StoreUnavailableError) this.writeFailed(error.reason, error.invalidated);
      throw error;
    }
  }

  /** Opens the database again when DuckDB invalidated it; StoreUnavailableError while it cannot. */
  private async ensureOpen(): Promise<void> {
    if (!this.invalidated) return;
    if (!this.closing) this.reopening ??= this.reopen().finally(() => (this.reopening = null));
    await this.reopening;
    if (this.invalidated)
      throw new StoreUnavailableError(this.writeFailure ?? 'the database could not be opened again', true);
  }

  /** Notes why the disk or the file failed, once per failure spell; opens an invalidated database again. */
  private writeFailed(reason: string, invalidated: boolean): void {
    if (this.writeFailure === null)
      console.error(`agl: the store cannot write (${reason}); writes get 503 until it can again`);
    this.writeFailure = reason;
    this.invalidated ||= invalidated;
  }

  /**
   * Opens the database again after DuckDB invalidated it (a checkpoint that could not write): every
   * statement of the old instance fails from then on. What was committed is in the file or its
   * WAL, which the new instance replays; the state in memory (span keys, sequence ids, rollouts)
   * holds exactly the committed writes, so it stays. Should the opening fail too (the disk still
   * full), the next write tries again.
   */
  private async reopen(): Promise<void> {
    // Waits for the writes in flight: they fail with the instance, each with its 503.
    await this.writer.close();
    await this.deriving?.catch(() => {}); // fails with the instance too; derived again later
    await this.idleStep;
    this.deriveConnection?.closeSync();
    this.deriveConnection = undefined;
    await this.budget?.close();
    this.budget = undefined;
    this.connection.closeSync();
    this.instance.closeSync();
    try {
      this.instance = await DuckDBInstance.create(this.path, instanceSettings(this.options));
      this.connection = await this.instance.connect();
      this.budget = await WriteBudget.open(
        await this.instance.connect(),
        this.options.writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES,
      );
      this.writer = this.newWriter();
      this.invalidated = false;
      console.error('agl: the store opened its database again after a fatal write error');
    } catch (error) {
      this.writeFailure = `the database could not be opened again: ${(error as Error).message.split('\n')[0]}`;
    }
  }

  private watchdogFailed(error: unknown): void {
    if (error instanceof StoreUnavailableError || this.watchdogErrorShown) return; // said by writeFailed
    this.watchdogErrorShown = true;
    console.error(`agl: the attempts' watchdog failed (${(error as Error).message}); further failures are not shown`);
  }

  /** Runs a read (or a checkpoint) with the write budget lifted (write-budget.ts). */
  private read<T>(work: () => Promise<T>): Promise<T> {
    return this.budget ? this.budget.whileReading(work) : work();
  }

  /**
   * Derives every stored span not derived yet (the deriver does it by itself when the store is
   * idle; this is for a caller that wants it now). Returns how many spans it derived.
   */
  async deriveAll(): Promise<number> {
    let total = 0;
    for (let n = -1; n !== 0; total += n) n = await this.deriveRound(DERIVE_ROUND_SPANS);
    return total;
  }

  /**
   * Whether an idle moment should derive now. A round costs tens of milliseconds of CPU however
   * few spans it covers (an app exporting every half second would pay that twice a second), so
   * a few spans wait up to DERIVE_EVERY_MS; reads derive them on the fly meanwhile.
   */
  private deriveDue(): boolean {
    if (!this.roundWasFull && this.spansSinceRound === 0) return false; // nothing waits
    return (
      this.roundWasFull ||
      this.spansSinceRound >= DERIVE_ROUND_SPANS ||
      Date.now() - this.lastRoundStart >= DERIVE_EVERY_MS
    );
  }

  /** Runs one round after the one in progress, if any (rounds never overlap). */
  private deriveRound(maxSpans: number): Promise<number> {
    if (this.options.readOnly) return Promise.resolve(0);
    return this.onDeriveConnection(0, async (connection) => {
      this.lastRoundStart = Date.now();
      this.spansSinceRound = 0;
      const derived = await this.read(() => deriveSpans(connection, maxSpans));
      // A round short of its size took all there was: the timer rests until spans are committed.
      this.roundWasFull = derived === maxSpans;
      return derived;
    });
  }

  /**
   * Runs `work` on the deriver's connection after the work in progress there, if any: rounds and
   * the deletes of moved spans change the same tables, so they never overlap. Once the store
   * closes, answers `closed` without running it. A failure closes the connection.
   */
  private onDeriveConnection<T>(closed: T, work: (connection: DuckDBConnection) => Promise<T>): Promise<T> {
    const step = (this.deriving ?? Promise.resolve())
      .catch(() => {})
      .then(async () => {
        if (this.closing) return closed;
        this.deriveConnection ??= await this.instance.connect();
        try {
          return await work(this.deriveConnection);
        } catch (error) {
          this.deriveConnection.closeSync();
          this.deriveConnection = undefined;
          throw error;
        }
      });
    this.deriving = step;
    // The failure goes to the caller through `step`; this copy of it is nobody's.
    void step
      .finally(() => {
        if (this.deriving === step) this.deriving = null;
      })
      .catch(() => {});
    return step;
  }

  /** Commits everything accepted, checkpoints the WAL into the file and closes it (once: a second call waits for the first). */
  close(): Promise<void> {
    this.closed ??= this.closeOnce();
    return this.closed;
  }

  private async closeOnce(): Promise<void> {
    clearInterval(this.watchdogTimer);
    clearInterval(this.idleTimer);
    clearInterval(this.moveTimer);
    // What this server holds goes to the span directory before it stops (a failure leaves the
    // rows in the file, moved by the next start).
    await this.moveSpans().catch((error) =>
      console.error(`agl: moving the last spans failed, moved at the next start: ${(error as Error).message}`),
    );
    this.closing = true;
    await this.reopening;
    await this.deriving?.catch(() => {}); // its failure was reported to whoever started the round
    await this.idleStep;
    this.deriveConnection?.closeSync();
    // Its calls in flight finish first (a copy of the state may still be written).
    await this.shared?.close();
    await this.writer.close();
    if (!this.options.readOnly) {
      await this.read(() => this.connection.run('CHECKPOINT')).catch((error: unknown) => {
        // Nothing is lost: the next open replays the WAL. But the user should know why it is large.
        console.error(
          `agl: the closing checkpoint failed, the WAL stays for the next open: ${(error as Error).message}`,
        );
      });
    }
    await this.budget?.close();
    this.connection.closeSync();
    this.instance.closeSync();
  }

  /**
   * Checkpoints the WAL into the file when it holds more than IDLE_CHECKPOINT_BYTES (true: done).
   * DuckDB refuses while another connection has a transaction open (a long query): tried again
   * at the next idle moment.
   */
  private async checkpointIfLarge(): Promise<boolean> {
    const wal = await stat(`${this.path}.wal`).catch(() => null);
    if (!wal || wal.size < IDLE_CHECKPOINT_BYTES) return false;
    return this.writer
      .between((connection) => this.read(() => connection.run('CHECKPOINT')).then(() => {}))
      .then(
        () => true,
        (error) => {
          const failed = writeError(error);
          if (failed instanceof StoreUnavailableError) this.writeFailed(failed.reason, failed.invalidated);
          return false;
        },
      );
  }

  /** This server's spans: with a span directory, the moved ones too. */
  private ownSpans(): string {
    return this.readSearchPath === undefined ? 'spans' : `fleet.spans WHERE server = ${sqlText(this.serverId)}`;
  }

  private async loadHotState(): Promise<void> {
    const counters = await this.connection.runAndReadAll(
      `SELECT rollout_id, max(sequence_id) FROM (SELECT * FROM ${this.ownSpans()}) WHERE rollout_id IS NOT NULL GROUP BY rollout_id`,
    );
    for (const [rollout, max] of counters.getRows()) this.sequences.set(String(rollout), Number(max ?? 0));
    const result = await this.connection.stream(`SELECT trace_id, span_id FROM ${this.ownSpans()}`);
    for (let chunk = await result.fetchChunk(); chunk && chunk.rowCount > 0; chunk = await result.fetchChunk()) {
      for (const [traceId, spanId] of chunk.getRows()) this.spanKeys.add(String(traceId), String(spanId));
    }
  }

  /**
   * The rows of `rows` that the store does not hold yet (nor a write in flight). The span-key
   * index answers for almost every span; only suspected re-deliveries cost exact comparison.
   */
  private async dropDuplicates(rows: ColumnarRows, isNew: Uint8Array): Promise<ColumnarRows> {
    const traceIds = rows.columns[SPAN.trace_id] as string[];
    const spanIds = rows.columns[SPAN.span_id] as string[];
    const suspects: string[] = [];
    for (let i = 0; i < rows.length; i++) {
      if (this.spanKeys.add(traceIds[i], spanIds[i])) isNew[i] = 1;
      else suspects.push(spanIds[i]);
    }
    if (suspects.length === 0) return rows;
    const inFlight = new Set<string>();
    for (const pending of this.pendingSpans)
      if (pending !== rows) for (const key of exactKeys(pending)) inFlight.add(key);
    const stored = await this.storedSpanKeys(suspects);
    const keys = exactKeys(rows);
    const seen = new Set<string>();
    const keep: number[] = [];
    keys.forEach((key, i) => {
      if (!seen.has(key) && !inFlight.has(key) && !stored.has(key)) keep.push(i);
      seen.add(key);
    });
    return keep.length === rows.length ? rows : selectRows(rows, keep);
  }

  private async storedSpanKeys(spanIds: string[]): Promise<Set<string>> {
    // Span ids were checked to be hex by the decoders, so they are safe as literals.
    const list = [...new Set(spanIds)].map((id) => `'${id.replace(/[^0-9a-f]/g, '')}'`).join(',');
    // A connection of its own: the writer's may be inside a transaction right now.
    const { rows } = await this.ownQuery(
      `SELECT trace_id, span_id, rollout_id, attempt_id FROM (SELECT * FROM ${this.ownSpans()}) WHERE span_id IN (${list})`,
    );
    return new Set(
      rows.map((r) =>
        spanKey(String(r.trace_id), String(r.span_id), r.rollout_id as string | null, r.attempt_id as string | null),
      ),
    );
  }

  /** The next span sequence id of a rollout (one counter per rollout, from 1). */
  private nextSequenceId(rolloutId: string): number {
    const next = (this.sequences.get(rolloutId) ?? 0) + 1;
    this.sequences.set(rolloutId, next);
    return next;
  }

  /** Every span is a heartbeat of its attempt (once per attempt in a batch). */
  private heartbeats(rows: ColumnarRows, state: RolloutState, now: number, changes: Changes): void {
    const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
    const attempts = rows.columns[SPAN.attempt_id] as (string | null)[];
    const seen = new Set<string>();
    for (let i = 0; i < rows.length; i++) {
      const rollout = rollouts[i];
      const attempt = attempts[i];
      // Spans of a request mostly share one attempt: skip the repeats without building keys.
      if (rollout === null || attempt === null || (rollout === rollouts[i - 1] && attempt === attempts[i - 1]))
        continue;
      if (seen.has(`${rollout}/${attempt}`)) continue;
      seen.add(`${rollout}/${attempt}`);
      state.heartbeat(rollout, attempt, now, changes);
    }
  }

  private assignSequenceIds(rows: ColumnarRows): void {
    const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
    const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
    const start = (rows.columns[SPAN.start_time] as Int64Column).values;
    const unassigned: { row: number; rollout: string }[] = [];
    for (let i = 0; i < rows.length; i++) {
      const rollout = rollouts[i];
      if (rollout === null) continue;
      const explicit = sequence[i];
      if (explicit === null) unassigned.push({ row: i, rollout });
      else if (explicit > (this.sequences.get(rollout) ?? 0)) this.sequences.set(rollout, explicit);
    }
    unassigned.sort((a, b) => (start[a.row] < start[b.row] ? -1 : start[a.row] > start[b.row] ? 1 : 0));
    for (const { row, rollout } of unassigned) sequence[row] = this.nextSequenceId(rollout);
  }
}

function instanceSettings(options: StoreOptions): Record<string, string> {
  // A checkpoint compresses what the WAL holds into the file and stalls the commits behind it:
  // at DuckDB's default 16 MB, ingest spends most of its time there (64 MB: 42,500 small spans/s
  // in process, 7,700 LLM-sized; no checkpoint: 60,500 and 15,200). So the store checkpoints
  // while idle, and DuckDB's own threshold is the bound under sustained ingest.
  return options.readOnly
    ? { access_mode: 'READ_ONLY' }
    : { checkpoint_threshold: options.checkpointThreshold ?? '1GB' };
}

function exactKeys(rows: ColumnarRows): string[] {
  // Trace and span ids are never null (SPAN_COLUMNS: notNull).
  const traceIds = rows.columns[SPAN.trace_id] as string[];
  const spanIds = rows.columns[SPAN.span_id] as string[];
  const rolloutIds = rows.columns[SPAN.rollout_id] as (string | null)[];
  const attemptIds = rows.columns[SPAN.attempt_id] as (string | null)[];
  return Array.from({ length: rows.length }, (_, i) => spanKey(traceIds[i], spanIds[i], rolloutIds[i], attemptIds[i]));
}
