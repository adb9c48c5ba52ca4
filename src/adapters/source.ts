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
