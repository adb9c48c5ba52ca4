import type { DuckDBConnection } from '@duckdb/node-api';
import { FRESH_ROW_MACROS } from '../sql/derived.js';

/** A query refused before it ran; the message says why, for the person who wrote it. */
export class QueryRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QueryRefusedError';
  }
}

// Table functions that compute or read the catalog, and the store's macros over its own tables;
// anything else (read_csv, read_parquet, glob, query, ...) could read local files or run other
// statements.
const ALLOWED_TABLE_FUNCTIONS = new Set<string>([
  ...FRESH_ROW_MACROS,
  'range',
  'generate_series',
  'unnest',
  'json_each',
  'json_tree',
  'pragma_table_info',
  'pragma_show',
  'duckdb_tables',
  'duckdb_views',
  'duckdb_columns',
  'duckdb_schemas',
  'duckdb_types',
  'duckdb_functions',
  'duckdb_constraints',
  'duckdb_indexes',
  'duckdb_databases',
  // What DuckDB holds in memory by tag, and what it spilled: an operator's view of a server's memory.
  'duckdb_memory',
  'duckdb_temporary_files',
  'summary',
]);
const REFUSED_FUNCTIONS = new Set(['getenv', 'current_setting']);
const PLAIN_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Checks that `sql` is one read-only query over the store's own tables, using DuckDB's own
 * parser (json_serialize_sql only accepts SELECT statements, DESCRIBE/SHOW/SUMMARIZE included)
 * and then walking the tree for file reads. Throws QueryRefusedError naming the problem.
 */
export async function assertReadOnlyQuery(connection: DuckDBConnection, sql: string): Promise<void> {
  if (sql.trim() === '') throw new QueryRefusedError('the query is empty');
  const reader = await connection.runAndReadAll('SELECT json_serialize_sql($sql::VARCHAR) AS tree', { sql });
  const tree = JSON.parse(String(reader.getRows()[0][0])) as {
    error: boolean;
    error_type?: string;
    error_message?: string;
    statements?: unknown[];
  };
  if (tree.error) {
    if (tree.error_type === 'not implemented') {
      throw new QueryRefusedError(
        'only read-only queries are allowed (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE); this statement would change or leave the store',
      );
    }
    throw new QueryRefusedError(`the query does not parse: ${tree.error_message ?? tree.error_type}`);
  }
  if (tree.statements?.length !== 1) {
    throw new QueryRefusedError(`send exactly one statement (got ${tree.statements?.length ?? 0})`);
  }
  walk(tree.statements[0]);
}

function walk(node: unknown): void {
  if (Array.isArray(node)) {
    for (const child of node) walk(child);
    return;
  }
  if (node === null || typeof node !== 'object') return;
  const n = node as Record<string, unknown>;
  if (n.type === 'TABLE_FUNCTION') {
    const fn = (n.function as { function_name?: string } | undefined)?.function_name ?? '';
    if (!ALLOWED_TABLE_FUNCTIONS.has(fn.toLowerCase())) {
      throw new QueryRefusedError(
        `table function ${fn}() is not allowed: queries read the store's tables only, not files or other databases`,
      );
    }
  } else if (n.type === 'BASE_TABLE' && typeof n.table_name === 'string' && !PLAIN_NAME.test(n.table_name)) {
    throw new QueryRefusedError(`"${n.table_name}" is not a table of the store: queries cannot read files`);
  } else if (
    n.class === 'FUNCTION' &&
    typeof n.function_name === 'string' &&
    REFUSED_FUNCTIONS.has(n.function_name.toLowerCase())
  ) {
    throw new QueryRefusedError(`function ${n.function_name}() is not allowed in queries`);
  }
  for (const value of Object.values(n)) {
    if (value !== null && typeof value === 'object') walk(value);
  }
}
