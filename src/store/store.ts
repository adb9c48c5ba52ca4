import { randomBytes } from 'node:crypto';
import type { BatchSink } from '../otlp/batch.js';
import type { ColumnarRows } from '../otlp/columns.js';
import {
  DERIVED_ONLY_SCHEMA,
  FRESH_CALLS_SCHEMA,
  FRESH_ROW_MACROS,
  LOG_EVENT_VIEWS,
  NO_LOG_EVENTS,
  NO_LOG_EVENTS_SCHEMA,
  OWN_CALLS_ONLY,
  OWN_CALLS_SCHEMA,
} from '../sql/derived.js';
import { TEMPORARY_MACROS_SQL } from '../sql/views.js';
import { sqlText } from '../sql/literals.js';
import { DuckDBFile } from './duckdb-file.js';
import {
  fleetReads,
  fleetViewsSql,
  HAS_FLEET_DERIVED_ONLY_SQL,
  HAS_FLEET_LOG_EVENTS_SQL,
  HAS_FLEET_OWN_CALLS_SQL,
} from './fleet-views.js';
import { SpanIngest, type WriteResult } from './ingest.js';
import { Maintenance } from './maintenance.js';
import type { StoreOptions } from './options.js';
import { type ReadSettings, withCheckedNames } from './query.js';
import type { ExportFormat, QueryResult } from '../api/query.js';
import { migrate } from './schema.js';
import { SequenceIds, type StoredSequenceIds } from './sequence-ids.js';
import type { LightningFile, ServerLightningStore } from './server-lightning.js';
import { hasSpanFiles, type MoveHooks, SERVER_ID, type SpanMoveLag } from './span-files.js';
import { fileStateHome, openStateHome, type StateBackend, type StateHome } from './state-home.js';

export {
  DEFAULT_MAX_QUEUED_BYTES,
  DEFAULT_QUERY_TIMEOUT_MS,
  DEFAULT_SPANS_MOVE_EVERY_MS,
  DEFAULT_WRITE_MEMORY_BYTES,
  type StoreOptions,
} from './options.js';
export type { StateBackend } from './state-home.js';
export type { WriteResult } from './ingest.js';

/** The own-calls-only reads of a file without a span directory (query.ts). */
const OWN_CALLS = { schema: OWN_CALLS_SCHEMA, condition: OWN_CALLS_ONLY };

/** What GET /v1/agl/health answers. */
type StoreHealth = (
  | { status: 'ok'; backend: StateBackend }
  | { status: 'degraded'; backend: StateBackend; reason: string }
) & { spanMove?: SpanMoveLag };

/**
 * The embedded store: one DuckDB file (duckdb-file.ts: the writer with group commit, reads on
 * connections of their own, opening again after a fatal write error), span ingest (ingest.ts),
 * the LightningStore's state in the file or in PostgreSQL (state-home.ts), and the work beside
 * the requests (maintenance.ts). This class opens them in order, wires them and closes them.
 */
export class DuckDBStore implements BatchSink {
  private closed: Promise<void> | null = null;

  private constructor(
    private readonly file: DuckDBFile,
    private readonly state: StateHome,
    private readonly ingest: SpanIngest,
    private readonly maintenance: Maintenance,
  ) {}

  static async open(options: StoreOptions): Promise<DuckDBStore> {
    const file = await DuckDBFile.open(options);
    let state: StateHome | undefined;
    try {
      const maintenance = new Maintenance(file, options);
      // The LightningStores write spans as OTLP ingest does: `ingest` is set before any request comes.
      let ingest: SpanIngest | undefined;
      const lightningFile: LightningFile = {
        write: (rows) => file.write(rows, 0),
        writeSpans: (rows) => (ingest as SpanIngest).writeSpans(rows, 0),
        querySpanRows: async (sql) => (await file.query(sql, false)).rows,
        spanCount: async () => Number((await file.query('SELECT count(*) AS n FROM spans', false)).rows[0].n),
      };
      if (options.readOnly) {
        // A file served with a span directory reads every server's spans, as its server does.
        const has = (schema: string) => `(SELECT count(*) > 0 FROM duckdb_schemas() WHERE schema_name = '${schema}')`;
        const schemas = await file.connection.runAndReadAll(
          `SELECT ${has('fleet')}, ${has(DERIVED_ONLY_SCHEMA)}, ${has(NO_LOG_EVENTS_SCHEMA)}, ${has(OWN_CALLS_SCHEMA)}, ${has(FRESH_CALLS_SCHEMA)},
            (${HAS_FLEET_DERIVED_ONLY_SQL}), (${HAS_FLEET_LOG_EVENTS_SQL}), (${HAS_FLEET_OWN_CALLS_SQL}),
            (SELECT count(*) = ${FRESH_ROW_MACROS.length} FROM duckdb_functions() WHERE schema_name = 'main' AND function_name IN (${FRESH_ROW_MACROS.map(sqlText).join(', ')}))
              AND (SELECT count(*) = ${LOG_EVENT_VIEWS.length} FROM duckdb_views() WHERE schema_name = 'main' AND view_name IN (${LOG_EVENT_VIEWS.map(sqlText).join(', ')}))`,
        );
        const [
          fleet,
          derivedOnly,
          logEvents,
          ownCalls,
          freshCalls,
          fleetDerivedOnly,
          fleetLogEvents,
          fleetOwnCalls,
          hasMacros,
        ] = schemas.getRows()[0];
        const freshCallsSchema = freshCalls === true ? FRESH_CALLS_SCHEMA : undefined;
        // A file of an older agl may have no derived-only views, no check of log events, and lack
        // the macros and views that the store's queries name.
        const reads: ReadSettings =
          fleet === true
            ? {
                ...fleetReads(fleetDerivedOnly === true, fleetLogEvents === true, fleetOwnCalls === true),
                freshCallsSchema,
              }
            : {
                caughtUpSchema: derivedOnly === true ? DERIVED_ONLY_SCHEMA : undefined,
                noLogEvents: logEvents === true ? NO_LOG_EVENTS : undefined,
                ownCalls: ownCalls === true ? OWN_CALLS : undefined,
                freshCallsSchema,
              };
        file.reads =
          hasMacros === true
            ? reads
            : { ...reads, setup: [reads.setup, TEMPORARY_MACROS_SQL].filter((sql) => sql !== undefined).join(';\n') };
        file.reads = await withCheckedNames(file.connection, file.reads);
        state = fileStateHome(file, lightningFile, new SequenceIds(storedSequenceIds(file, 'spans')), options);
        ingest = new SpanIngest(file, state, 'spans', maintenance);
        return new DuckDBStore(file, state, ingest, maintenance);
      }
      await migrate(file.connection);
      const serverId = options.spansDir === undefined ? '' : await openSpansDir(file, maintenance, options);
      // A span directory's reads are the fleet's (openSpansDir), not those of this file's tables alone.
      if (serverId === '')
        file.reads = {
          caughtUpSchema: DERIVED_ONLY_SCHEMA,
          noLogEvents: NO_LOG_EVENTS,
          ownCalls: OWN_CALLS,
          freshCallsSchema: FRESH_CALLS_SCHEMA,
        };
      file.reads = await withCheckedNames(file.connection, file.reads);
      // This server's spans: with a span directory, the moved ones too.
      const ownSpans = serverId === '' ? 'spans' : `fleet.spans WHERE server = ${sqlText(serverId)}`;
      const sequences = new SequenceIds(storedSequenceIds(file, ownSpans));
      state = await openStateHome(file, lightningFile, sequences, options);
      ingest = new SpanIngest(file, state, ownSpans, maintenance);
      await ingest.load();
      await file.startWriteBudget();
      maintenance.start(state.lightning);
      return new DuckDBStore(file, state, ingest, maintenance);
    } catch (error) {
      await state?.close();
      file.abandon();
      throw error;
    }
  }

  get path(): string {
    return this.file.path;
  }

  /** The LightningStore (Agent Lightning's): in this file, or in PostgreSQL (`state`). */
  get lightning(): ServerLightningStore {
    return this.state.lightning;
  }

  /** Where the LightningStore's state lives. */
  get backend(): StateBackend {
    return this.state.backend;
  }

  /**
   * 'degraded' while writes fail for the disk's or the file's sake (disk full, I/O error), with
   * DuckDB's reason, or while PostgreSQL is out of reach; 'ok' again once a write succeeds
   * (clients retry after the 503's Retry-After, and each retry tries again).
   */
  get health(): StoreHealth {
    const reason = this.file.failure ?? this.state.failure;
    const spanMove = this.maintenance.spanMoveLag;
    return reason === null
      ? { status: 'ok', backend: this.backend, ...(spanMove && { spanMove }) }
      : { status: 'degraded', backend: this.backend, reason, ...(spanMove && { spanMove }) };
  }

  /** True while the write queue is full: new writes would get StoreBusyError. */
  get busy(): boolean {
    return this.file.busy;
  }

  /**
   * Stores spans durably: drops re-delivered ones, gives spans of a rollout without a sequence
   * id the next ids of that rollout (in start-time order), and resolves after the commit.
   */
  writeSpans(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    return this.ingest.writeSpans(rows, bytes);
  }

  writeLogs(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    return this.ingest.writeLogs(rows, bytes);
  }

  /** A SQL query over the file (with the state copied from PostgreSQL up to date first, when it lives there). */
  async query(sql: string, options: { guard?: boolean } = {}): Promise<QueryResult> {
    await this.state.syncReplica();
    return this.file.query(sql, options.guard ?? true);
  }

  /**
   * The rows of a query batch by batch, with no row or time limit (adapters read large results
   * this way); `typedLists`: lists of numbers as typed arrays (StreamOptions).
   */
  async *streamQuery(
    sql: string,
    options: { guard?: boolean; typedLists?: boolean } = {},
  ): AsyncGenerator<Record<string, unknown>[]> {
    await this.state.syncReplica();
    yield* this.file.stream(sql, options.guard ?? true, options.typedLists);
  }

  /** Writes a query's rows to a file (COPY); returns how many. */
  async exportQuery(
    sql: string,
    path: string,
    format: ExportFormat,
    options: { guard?: boolean; onProgress?: (fraction: number) => void } = {},
  ): Promise<number> {
    await this.state.syncReplica();
    return this.file.export(sql, path, format, { guard: options.guard ?? true, onProgress: options.onProgress });
  }

  /**
   * Derives every stored span not derived yet (the store does it by itself when idle; this is
   * for a caller that wants it now). Returns how many spans it derived.
   */
  deriveAll(): Promise<number> {
    return this.maintenance.deriveAll();
  }

  /**
   * Moves every span committed so far to the span directory, after the move in progress, then
   * the log records; returns how many spans it moved (0 without spansDir). Tests cut a move of
   * spans off with hooks.
   */
  moveSpans(hooks: MoveHooks = {}): Promise<number> {
    return this.maintenance.moveSpans(hooks);
  }

  /** Commits everything accepted, checkpoints the WAL into the file and closes it (once: a second call waits for the first). */
  close(): Promise<void> {
    this.closed ??= this.closeOnce();
    return this.closed;
  }

  private async closeOnce(): Promise<void> {
    await this.maintenance.close();
    // Its calls in flight finish first (a copy of the state may still be written).
    await this.state.close();
    await this.file.close();
  }
}

/**
 * Defines the schema `fleet` over the span directory and reads through it; unless the store
 * only reads the directory, readies the move of this file's spans (span-files.ts). Before any
 * timer: a directory that cannot be written fails the open with nothing running. Returns this
 * file's server id.
 */
async function openSpansDir(file: DuckDBFile, maintenance: Maintenance, options: StoreOptions): Promise<string> {
  const dir = options.spansDir as string;
  const serverId = options.serverId ?? (await persistedServerId(file));
  if (!SERVER_ID.test(serverId)) throw new Error(`a server id is letters, digits, '.', '_' or '-', not "${serverId}"`);
  if (options.spansDirReadOnly) {
    if (!(await hasSpanFiles(dir))) throw new Error(`no span files in ${dir} (agl serve --spans-dir writes them)`);
  } else {
    await maintenance.openMovers(dir, serverId);
  }
  const connection = await file.connect();
  try {
    await connection.run(fleetViewsSql(dir, serverId));
  } finally {
    connection.closeSync();
  }
  file.reads = { ...fleetReads(true, true, true), freshCallsSchema: FRESH_CALLS_SCHEMA };
  return serverId;
}

/** This file's server id in the span directory: made once, then kept in agl_meta. */
async function persistedServerId(file: DuckDBFile): Promise<string> {
  const made = `agl-${randomBytes(6).toString('hex')}`;
  await file.connection.run("INSERT OR IGNORE INTO agl_meta VALUES ('server_id', $made)", { made });
  const reader = await file.connection.runAndReadAll("SELECT value FROM agl_meta WHERE key = 'server_id'");
  return String(reader.getRows()[0][0]);
}

/** The highest sequence id of each rollout among `ownSpans` (the relation of this server's spans). */
function storedSequenceIds(file: DuckDBFile, ownSpans: string): StoredSequenceIds {
  return async (rolloutIds) => {
    const { rows } = await file.query(
      `SELECT rollout_id, max(sequence_id) AS last FROM (SELECT * FROM ${ownSpans})
        WHERE rollout_id IN (${rolloutIds.map(sqlText).join(', ')}) GROUP BY rollout_id`,
      false,
    );
    return new Map(rows.map((row) => [String(row.rollout_id), Number(row.last ?? 0)]));
  };
}
