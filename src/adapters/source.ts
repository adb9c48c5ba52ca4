/**
 * Where adapters read from: the embedded store or a server's query route (`agl export --db` or
 * `--url`). Adapters are SQL; a source runs it.
 */
export interface QuerySource {
  /** The rows of one read-only query, batch by batch, in order, with no row limit. */
  stream(sql: string, options?: StreamOptions): AsyncIterable<Record<string, unknown>[]>;
}

export interface StreamOptions {
  /**
   * Lists of numbers (token ids, logprobs) may come as typed arrays, which a reader of millions
   * of them (a GRPO batch) copies without boxing each; a source that cannot (a server's query
   * route) gives arrays, and the reader takes either.
   */
  readonly typedLists?: boolean;
}

/** Every row of a query, in order. */
export async function allRows(source: QuerySource, sql: string): Promise<Record<string, unknown>[]> {
  const rows: Record<string, unknown>[] = [];
  for await (const batch of source.stream(sql)) for (const row of batch) rows.push(row);
  return rows;
}
