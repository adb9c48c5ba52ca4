import { sqlText } from '../store/sql.js';

/**
 * Where adapters read from: the embedded store or a server's query route (`agl export --db` or
 * `--url`). Adapters are SQL; a source runs it.
 */
export interface QuerySource {
  /** The rows of one read-only query, batch by batch, in order, with no row limit. */
  stream(sql: string): AsyncIterable<Record<string, unknown>[]>;
}

/** Every row of a query, in order. */
export async function allRows(source: QuerySource, sql: string): Promise<Record<string, unknown>[]> {
  const rows: Record<string, unknown>[] = [];
  for await (const batch of source.stream(sql)) for (const row of batch) rows.push(row);
  return rows;
}

/** Whether `mode` can be a rollout mode (train, val, test, or a word of the user's): safe as a SQL literal. */
export const isRolloutMode = (mode: string): boolean => /^[\w-]+$/.test(mode);

/** The SQL condition `column = mode`, for a checked rollout mode. */
export function rolloutModeCondition(column: string, mode: string): string {
  if (!isRolloutMode(mode)) throw new TypeError(`rolloutMode must be a word such as train or val, not "${mode}"`);
  return `${column} = '${mode}'`;
}

/** A SQL string literal holding a regular expression that both JS and DuckDB (RE2) accept. */
export function sqlRegex(pattern: string): string {
  try {
    new RegExp(pattern);
  } catch (error) {
    throw new TypeError(`not a regular expression: ${pattern} (${(error as Error).message})`);
  }
  return sqlText(pattern);
}
