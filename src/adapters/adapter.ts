/**
 * The one shape of an adapter: recorded spans (through a QuerySource) to training records of one
 * kind. `agl export` looks adapters up by kind (src/runtime/export-command.ts); the library's
 * functions (traceToTriplets, traceToMessages, traceToTrajectories) read through them.
 */
import type { QuerySource } from './source.js';

/** A record an adapter left out, with the rollout and span it came from. */
export interface SkippedRecord {
  readonly rollout_id: string | null;
  readonly span_id: string;
  readonly reason: string;
}

/** What became of the calls, for a person: the records left out and one line per count. */
export interface AdapterReport {
  readonly skipped: readonly SkippedRecord[];
  readonly notes: readonly string[];
}

/**
 * An adapter's answer. `batches` are the records in order, read once; `stats` are complete once
 * they are read. `sql`, where SQL gives the records whole: a query whose rows are the records, so
 * that DuckDB can write them to a file with no row passing through JS.
 */
export interface Adapted<R, S> {
  readonly sql?: string;
  /**
   * `parquet`: `sql`'s rows are the records only as Parquet columns (a field a record lacks is
   * NULL there; JSON Lines would get `null` where the record has no key), so other formats are
   * written from `batches`.
   */
  readonly sqlFor?: 'parquet';
  readonly batches: AsyncIterable<R[]>;
  readonly stats: S;
}

export interface Adapter<O, R, S> {
  /** Checks `options` (a TypeError names what is wrong) and starts reading. */
  read(source: QuerySource, options?: O): Promise<Adapted<R, S>>;
  /** The stats of a read, as `agl export` reports them. */
  report(stats: S): AdapterReport;
}

/** Every record of `batches`, in order. */
export async function collect<R>(batches: AsyncIterable<R[]>): Promise<R[]> {
  const records: R[] = [];
  for await (const batch of batches) for (const record of batch) records.push(record);
  return records;
}
