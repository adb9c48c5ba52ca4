import type { LightningStore } from '../api/lightning-store.js';
import type { ColumnarRows } from '../otlp/columns.js';
import type { TableRows } from './writer.js';

/**
 * What a LightningStore of the server (the embedded one, the one over PostgreSQL) is given of
 * the DuckDB file its spans live in: the store's rules are theirs, the file supplies rows.
 */
export interface LightningFile {
  /** Appends rows (state history, or the state copied from PostgreSQL); resolves once committed. */
  write(writes: readonly TableRows[]): Promise<void>;
  /** Stores span rows as OTLP ingest does: de-duplicated, sequenced, each one a heartbeat. */
  writeSpans(rows: ColumnarRows): Promise<{ stored: number; duplicates: number }>;
  querySpanRows(sql: string): Promise<Record<string, unknown>[]>;
  spanCount(): Promise<number>;
}

/** The LightningStore a server serves, wherever its state lives. */
export interface ServerLightningStore extends LightningStore {
  /** Runs the watchdog now and writes what it changed (the server's timer calls this). */
  watchdog(): Promise<void>;
}
