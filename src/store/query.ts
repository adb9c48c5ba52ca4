import { DuckDBTypeId, type DuckDBConnection, type DuckDBInstance, type DuckDBResultReader } from '@duckdb/node-api';
import { parseJsonExact } from '../api/exact-json.js';
import type { ExportFormat, QueryResult } from '../api/query.js';
import { jsonTextTooDeep } from '../otlp/nesting.js';
import { chunkRows } from './chunk-rows.js';
import { assertReadOnlyQuery, QueryRefusedError } from './read-only-sql.js';
import { CAUGHT_UP, FRESH_CALLS_TABLE_SQL, NO_LOG_EVENTS_SCHEMA } from '../sql/derived.js';
import { sqlText } from '../sql/literals.js';

interface QueryOptions {
  /** The query is interrupted after this long (QueryTimeoutError); Infinity for no limit. */
  readonly timeoutMs: number;
  /** More rows than this is an error that suggests LIMIT or an export to a file. */
  readonly maxRows: number;
  /** Refuse anything but one read-only query over the store's tables (server side). */
  readonly guard: boolean;
  /** Where unqualified names are looked up (DuckDB's search_path), if not in the file's schema. */
  readonly searchPath?: string;
  /**
   * The schema of the derived-only views (DERIVED_ONLY_SCHEMA, or the span directory's), when
   * the file has it: names are looked up there first while no span waits for the deriver.
   */
  readonly caughtUpSchema?: string;
  /**
   * The condition that no GenAI log event is stored (NO_LOG_EVENTS, or the span directory's), when
   * the file has what it reads and the schema NO_LOG_EVENTS_SCHEMA, whose log-event views are
   * looked up first while it holds.
   */
  readonly noLogEvents?: string;
  /**
   * The schema of llm_calls as agl's own calls alone (OWN_CALLS_SCHEMA, or the span directory's)
   * and the condition that no call of another dialect is stored (OWN_CALLS_ONLY, or the
   * directory's), when the file has them: looked up first while that holds besides the two above.
   */
  readonly ownCalls?: { readonly schema: string; readonly condition: string };
  /**
   * The schema of llm_calls over a read's own table of the calls not derived yet
   * (FRESH_CALLS_SCHEMA), when the file has it: looked up first by a read of llm_calls while
   * spans wait for the deriver.
   */
  readonly freshCallsSchema?: string;
  /**
   * The names whose lookup the checks above decide (withCheckedNames): a read whose SQL names
   * none of them skips the checks, 3-4 ms of a 5 ms count of spans (12 of 20 through a span
   * directory). Without it, every read checks.
   */
  readonly checkedNames?: RegExp;
  /** SQL each read's connection runs first: a file of an older agl gets temporary macros and views it lacks. */
  readonly setup?: string;
}

/** What a read's connection is set up with (DuckDBFile's read settings). */
export type ReadSettings = Pick<
  QueryOptions,
  'searchPath' | 'caughtUpSchema' | 'noLogEvents' | 'ownCalls' | 'freshCallsSchema' | 'checkedNames' | 'setup'
>;

/** A fresh connection for one read, looking names up in `searchPath` when given. */
async function readConnection(instance: DuckDBInstance, settings: ReadSettings): Promise<DuckDBConnection> {
  const connection = await instance.connect();
  if (settings.setup !== undefined) await connection.run(settings.setup);
  if (settings.searchPath !== undefined) await connection.run(`SET search_path = ${sqlText(settings.searchPath)}`);
  return connection;
}

/**
 * Begins a read's READ ONLY transaction. In this snapshot, when every stored span is derived,
 * names are looked up in the derived-only views first, and when no GenAI log event is stored,
 * in the log-event views of no rows; when both hold and every call is agl's own, in llm_calls
 * of those alone: the same rows, planned without the SQL that derives spans, reads log records
 * or sets other dialects' calls against agl's (src/sql/derived.ts, DERIVED_ONLY_SCHEMA,
 * NO_LOG_EVENTS_SCHEMA and OWN_CALLS_SCHEMA). When spans wait instead, a read of llm_calls
 * derives their calls into a table of its own first, which FRESH_CALLS_SCHEMA's llm_calls reads
 * (SQL that brings its own `fresh_calls` keeps it).
 */
async function beginRead(connection: DuckDBConnection, settings: ReadSettings, sql: string) {
  await connection.run('BEGIN TRANSACTION READ ONLY');
  const { caughtUpSchema, noLogEvents, ownCalls, freshCallsSchema, checkedNames } = settings;
  if (caughtUpSchema === undefined && noLogEvents === undefined) return;
  if (checkedNames !== undefined && !checkedNames.test(sql)) return;
  const reader = await connection.runAndReadAll(
    `SELECT ${caughtUpSchema === undefined ? 'false' : CAUGHT_UP}, ${noLogEvents ?? 'false'}, ${ownCalls?.condition ?? 'false'}`,
  );
  const [caughtUp, noneStored, ownOnly] = reader.getRows()[0];
  const first: string[] = [];
  if (ownCalls !== undefined && caughtUp === true && noneStored === true && ownOnly === true)
    first.push(ownCalls.schema);
  if (caughtUp === true) first.push(caughtUpSchema as string);
  else if (freshCallsSchema !== undefined && NAMES_LLM_CALLS.test(sql) && !sql.includes('fresh_calls')) {
    await connection.run(FRESH_CALLS_TABLE_SQL);
    first.push(freshCallsSchema);
  }
  if (noneStored === true) first.push(NO_LOG_EVENTS_SCHEMA);
  if (first.length > 0)
    await connection.run(`SET search_path = ${sqlText([...first, settings.searchPath ?? 'main'].join(','))}`);
}

const NAMES_LLM_CALLS = /\bllm_calls\b/i;

/**
 * `settings` with `checkedNames`: what the schemas of its checks define, and every view and
 * macro whose SQL names one of those or of the views so found. A name matched where it is not
 * one (in a string) only costs the checks; the schemas hold the same rows as the names they
 * hide, so a read that skips them is slower at most, never wrong.
 */
export async function withCheckedNames(connection: DuckDBConnection, settings: ReadSettings): Promise<ReadSettings> {
  const schemas = [
    settings.caughtUpSchema,
    settings.noLogEvents === undefined ? undefined : NO_LOG_EVENTS_SCHEMA,
    settings.ownCalls?.schema,
  ].flatMap((schema) => (schema === undefined ? [] : [sqlText(schema)]));
  if (schemas.length === 0) return settings;
  const reader = await connection.runAndReadAll(`SELECT view_name, schema_name IN (${schemas.join(', ')}), sql
    FROM duckdb_views() WHERE NOT internal
    UNION ALL SELECT DISTINCT function_name, schema_name IN (${schemas.join(', ')}), macro_definition
    FROM duckdb_functions() WHERE function_type IN ('macro', 'table_macro') AND NOT internal`);
  const objects = reader
    .getRows()
    .map(([name, hidden, definition]) => ({ name: String(name), hidden, definition: String(definition) }));
  const names = new Set(objects.filter((object) => object.hidden === true).map((object) => object.name));
  const pattern = () => new RegExp(`\\b(${[...names].map((name) => name.replace(/\W/g, '\\$&')).join('|')})\\b`, 'i');
  for (let grown = true; grown; ) {
    const naming = pattern();
    const found = objects.filter((object) => !names.has(object.name) && naming.test(object.definition));
    for (const object of found) names.add(object.name);
    grown = found.length > 0;
  }
  return { ...settings, checkedNames: pattern() };
}

export class QueryTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`the query ran longer than ${timeoutMs / 1000} s and was stopped`);
    this.name = 'QueryTimeoutError';
  }
}

/** A statement past its time limit still runs (see withReadOnlyConnection): retry later (503). */
export class QueryBusyError extends Error {
  constructor() {
    super('a query stopped at its time limit is still finishing; retry in a few seconds');
    this.name = 'QueryBusyError';
  }
}

/**
 * Statements past their time limit, until they end. One that DuckDB could not interrupt holds
 * one of the process's four libuv threads, on which every DuckDB call and file access runs: a
 * user's query waits a moment for them (an interrupted one ends within milliseconds), and is
 * refused while one still runs, so that such queries cannot take all four.
 */
const overrunning = new Set<Promise<void>>();

/**
 * Runs one read-only query on a fresh connection inside a READ ONLY transaction, so a query
 * can never change the store, even one the guard let through.
 */
export async function runQuery(instance: DuckDBInstance, sql: string, options: QueryOptions): Promise<QueryResult> {
  return withReadOnlyConnection(instance, sql, options, async (connection) => {
    const reader = await connection.runAndReadUntil(sql, options.maxRows + 1);
    if (reader.currentRowCount > options.maxRows) {
      throw new QueryRefusedError(
        `the result has more than ${options.maxRows} rows; add a LIMIT or export it to a file (--out)`,
      );
    }
    return toQueryResult(reader);
  });
}

/**
 * The rows of one read-only query, a batch (DuckDB data chunk) at a time, in order, without a
 * row limit: what adapters read large results with.
 */
export async function* streamQuery(
  instance: DuckDBInstance,
  sql: string,
  options: Pick<QueryOptions, 'guard'> & ReadSettings & { readonly typedLists?: boolean },
): AsyncGenerator<Record<string, unknown>[]> {
  const connection = await readConnection(instance, options);
  try {
    if (options.guard) await assertReadOnlyQuery(connection, sql);
    await beginRead(connection, options, sql);
    const result = await connection.stream(sql);
    const typeTrees = result.columnTypes();
    const names = result.deduplicatedColumnNames();
    for await (const chunk of result) {
      if (chunk.rowCount > 0)
        yield normalizeRows(chunkRows(chunk, names, typeTrees, options.typedLists ?? false), names, typeTrees);
    }
  } finally {
    connection.closeSync();
  }
}

const COPY_OPTIONS: Record<ExportFormat, string> = {
  // Dictionaries for columns of few distinct values only (model, agent, status): the text of
  // records is mostly unique, and building a dictionary for it cost a fifth of an export.
  parquet: 'FORMAT parquet, DICTIONARY_SIZE_LIMIT 1000',
  csv: 'FORMAT csv, HEADER true',
  json: 'FORMAT json, ARRAY true',
  ndjson: 'FORMAT json',
};

/**
 * Writes the result of a read-only query to `path` with DuckDB's COPY (types kept exactly);
 * returns how many rows it wrote. `onProgress` hears DuckDB's own estimate of the share done.
 */
export async function exportQuery(
  instance: DuckDBInstance,
  sql: string,
  path: string,
  format: ExportFormat,
  options: Omit<QueryOptions, 'maxRows'> & { onProgress?: (fraction: number) => void; rowGroupRows?: number },
): Promise<number> {
  const body = sql.trim().replace(/;\s*$/, '');
  const rowGroups = options.rowGroupRows === undefined ? '' : `, ROW_GROUP_SIZE ${options.rowGroupRows}`;
  const copyOptions = `${COPY_OPTIONS[format]}${rowGroups}`;
  return withReadOnlyConnection(instance, sql, { ...options, maxRows: 0 }, async (connection) => {
    const { onProgress } = options;
    const timer =
      onProgress &&
      setInterval(() => {
        const { percentage } = connection.progress;
        if (percentage >= 0) onProgress(percentage / 100);
      }, 200);
    try {
      const reader = await connection.runAndReadAll(`COPY (${body}) TO ${sqlText(path)} (${copyOptions})`);
      return Number(reader.getRows()[0]?.[0] ?? 0);
    } finally {
      clearInterval(timer);
    }
  });
}

/**
 * Runs `work` on a fresh connection inside a READ ONLY transaction. At the time limit the
 * statement is interrupted and the caller gets QueryTimeoutError at once: DuckDB checks its
 * interrupt flag between vectors, not inside one scalar function, so a single long call
 * (`repeat('x', 3000000000)`, a large `levenshtein`) would run on for as long as it takes. Such a
 * statement finishes on its own connection, which is closed then.
 */
async function withReadOnlyConnection<T>(
  instance: DuckDBInstance,
  sql: string,
  options: QueryOptions,
  work: (connection: DuckDBConnection) => Promise<T>,
): Promise<T> {
  if (options.guard && overrunning.size > 0) {
    await Promise.race([Promise.all(overrunning), new Promise((resolve) => setTimeout(resolve, 1000))]);
    if (overrunning.size > 0) throw new QueryBusyError();
  }
  const connection = await readConnection(instance, options);
  const running = (async () => {
    if (options.guard) await assertReadOnlyQuery(connection, sql);
    await beginRead(connection, options, sql);
    try {
      return await work(connection);
    } finally {
      // Fails only when the transaction is gone already (an interrupted or failed statement).
      await connection.run('ROLLBACK').catch(() => {});
    }
  })();
  // Its outcome goes to the caller below (or is past the limit, and nobody's).
  const ended = running.then(noop, noop).then(() => {
    connection.closeSync();
    overrunning.delete(ended);
  });
  // Infinity: no limit (the CLI on the user's own file).
  if (!Number.isFinite(options.timeoutMs)) return running;
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      connection.interrupt();
      overrunning.add(ended);
      reject(new QueryTimeoutError(options.timeoutMs));
    }, options.timeoutMs);
  });
  try {
    return await Promise.race([running, limit]);
  } finally {
    clearTimeout(timer);
  }
}

const noop = () => {};

function toQueryResult(reader: DuckDBResultReader): QueryResult {
  const names = reader.deduplicatedColumnNames();
  const types = reader.columnTypes();
  const typeTrees = reader.columnTypes();
  const columns = names.map((name, i) => ({ name, type: types[i].alias ?? types[i].toString() }));
  return { columns, rows: normalizeRows(reader.getRowObjectsJson() as Record<string, unknown>[], names, typeTrees) };
}

function normalizeRows(
  rows: Record<string, unknown>[],
  names: string[],
  typeTrees: readonly TypeTree[],
): Record<string, unknown>[] {
  for (let i = 0; i < names.length; i++) {
    if (!needsNormalizing(typeTrees[i])) continue;
    for (const row of rows) row[names[i]] = normalize(row[names[i]], typeTrees[i]);
  }
  return rows;
}

/** The shape of DuckDB's JSON type description (`columnTypesJson`). */
/** What normalizing reads of a column's DuckDBType (the node API's type classes have these fields). */
interface TypeTree {
  readonly typeId: number;
  readonly alias?: string;
  readonly valueType?: TypeTree;
  readonly entryNames?: readonly string[];
  readonly entryTypes?: readonly TypeTree[];
}

const WIDE_INTEGERS = new Set([DuckDBTypeId.BIGINT, DuckDBTypeId.UBIGINT, DuckDBTypeId.HUGEINT, DuckDBTypeId.UHUGEINT]);

function needsNormalizing(type: TypeTree): boolean {
  return (
    type.alias === 'JSON' ||
    WIDE_INTEGERS.has(type.typeId) ||
    (type.valueType !== undefined && needsNormalizing(type.valueType)) ||
    (type.entryTypes ?? []).some(needsNormalizing)
  );
}

/**
 * DuckDB's JSON conversion gives 64-bit integers as strings and JSON columns as text, at any
 * depth; users want numbers where they are exact and JSON values as values.
 */
function normalize(value: unknown, type: TypeTree): unknown {
  if (value === null || value === undefined) return value;
  // A value nested past the limit stays text: parsed, it would overflow the stack of the JSON answer.
  if (type.alias === 'JSON')
    return typeof value === 'string' && !jsonTextTooDeep(value) ? parseJsonExact(value) : value;
  if (WIDE_INTEGERS.has(type.typeId)) {
    return typeof value === 'string' && Number.isSafeInteger(Number(value)) ? Number(value) : value;
  }
  const { valueType, entryNames, entryTypes } = type;
  if (Array.isArray(value) && valueType) return value.map((item) => normalize(item, valueType));
  if (entryNames && entryTypes && typeof value === 'object') {
    const struct = value as Record<string, unknown>;
    for (const [i, name] of entryNames.entries()) struct[name] = normalize(struct[name], entryTypes[i]);
  }
  return value;
}
