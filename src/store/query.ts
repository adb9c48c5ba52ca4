import type { DuckDBConnection, DuckDBInstance, DuckDBResultReader } from '@duckdb/node-api';
import { parseJsonExact } from '../exact-json.js';
import { assertReadOnlyQuery, QueryRefusedError } from './read-only-sql.js';

export interface QueryColumn {
  readonly name: string;
  readonly type: string;
}

/** What `POST /v1/agl/query` answers and `agl query` prints. */
export interface QueryResult {
  readonly columns: QueryColumn[];
  readonly rows: Record<string, unknown>[];
}

export interface QueryOptions {
  /** The query is interrupted after this long (QueryTimeoutError). */
  readonly timeoutMs: number;
  /** More rows than this is an error that suggests LIMIT or an export to a file. */
  readonly maxRows: number;
  /** Refuse anything but one read-only query over the store's tables (server side). */
  readonly guard: boolean;
}

export class QueryTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`the query ran longer than ${timeoutMs / 1000} s and was stopped`);
    this.name = 'QueryTimeoutError';
  }
}

/**
 * Runs one read-only query on a fresh connection inside a READ ONLY transaction, so a query
 * can never change the store, even one the guard let through.
 */
export async function runQuery(instance: DuckDBInstance, sql: string, options: QueryOptions): Promise<QueryResult> {
  return withReadOnlyConnection(instance, sql, options, async (connection) => {
    const reader = await connection.runAndReadUntil(sql, options.maxRows + 1);
    if (reader.currentRowCount > options.maxRows) {
      throw new QueryRefusedError(`the result has more than ${options.maxRows} rows; add a LIMIT or export it to a file (--out)`);
    }
    return toQueryResult(reader);
  });
}

/** COPY's formats for exporting a query's result to a file. */
export type ExportFormat = 'parquet' | 'csv' | 'json' | 'ndjson';

const COPY_OPTIONS: Record<ExportFormat, string> = {
  parquet: 'FORMAT parquet',
  csv: 'FORMAT csv, HEADER true',
  json: 'FORMAT json, ARRAY true',
  ndjson: 'FORMAT json',
};

/** Writes the result of a read-only query to `path` with DuckDB's COPY (types kept exactly). */
export async function exportQuery(
  instance: DuckDBInstance,
  sql: string,
  path: string,
  format: ExportFormat,
  options: Omit<QueryOptions, 'maxRows'>,
): Promise<void> {
  const body = sql.trim().replace(/;\s*$/, '');
  const copyOptions = COPY_OPTIONS[format];
  await withReadOnlyConnection(instance, sql, { ...options, maxRows: 0 }, async (connection) => {
    await connection.run(`COPY (${body}) TO '${path.replaceAll("'", "''")}' (${copyOptions})`);
  });
}

async function withReadOnlyConnection<T>(
  instance: DuckDBInstance,
  sql: string,
  options: QueryOptions,
  work: (connection: DuckDBConnection) => Promise<T>,
): Promise<T> {
  const connection = await instance.connect();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    connection.interrupt();
  }, options.timeoutMs);
  try {
    if (options.guard) await assertReadOnlyQuery(connection, sql);
    await connection.run('BEGIN TRANSACTION READ ONLY');
    try {
      return await work(connection);
    } finally {
      await connection.run('ROLLBACK').catch(() => {});
    }
  } catch (error) {
    if (timedOut) throw new QueryTimeoutError(options.timeoutMs);
    throw error;
  } finally {
    clearTimeout(timer);
    connection.closeSync();
  }
}

const INTEGER_TYPES = new Set(['BIGINT', 'UBIGINT', 'HUGEINT', 'UHUGEINT']);

function toQueryResult(reader: DuckDBResultReader): QueryResult {
  const names = reader.deduplicatedColumnNames();
  const types = reader.columnTypes();
  const columns = names.map((name, i) => ({ name, type: types[i].alias ?? types[i].toString() }));
  const rows = reader.getRowObjectsJson() as Record<string, unknown>[];
  // The JSON converter gives 64-bit integers as strings and JSON columns as text; users want
  // numbers where they are exact and JSON values as values.
  for (const { name, type } of columns) {
    if (INTEGER_TYPES.has(type)) {
      for (const row of rows) {
        const v = row[name];
        if (typeof v === 'string' && Number.isSafeInteger(Number(v))) row[name] = Number(v);
      }
    } else if (type === 'JSON') {
      for (const row of rows) {
        const v = row[name];
        if (typeof v === 'string') row[name] = parseJsonExact(v);
      }
    }
  }
  return { columns, rows };
}
