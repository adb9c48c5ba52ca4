/**
 * A store over a span directory (span-files.ts) for `agl export --spans-dir`: the Parquet files
 * of every server loaded into a temporary DuckDB file, each server's spans in the order it
 * committed them, and derived there. An export then runs the same SQL as on one server that
 * stored every span. The spans not moved yet are not in it, nor logs (GenAI log events) and the
 * LightningStore's state, which the servers keep in their own files (or PostgreSQL).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { sqlText } from './sql.js';
import { DuckDBStore } from './store.js';

export interface SpansDirSnapshot {
  readonly store: DuckDBStore;
  /** Closes the store and removes its file. */
  close(): Promise<void>;
}

export async function openSpansDirSnapshot(dir: string): Promise<SpansDirSnapshot> {
  const folder = await mkdtemp(join(tmpdir(), 'agl-spans-dir-'));
  try {
    const path = join(folder, 'spans.duckdb');
    await (await DuckDBStore.open({ path, deriveWhenIdleMs: Number.POSITIVE_INFINITY })).close();
    await loadSpans(path, dir);
    const store = await DuckDBStore.open({
      path,
      deriveWhenIdleMs: Number.POSITIVE_INFINITY,
      queryTimeoutMs: Number.POSITIVE_INFINITY,
    });
    await store.deriveAll();
    return {
      store,
      close: async () => {
        await store.close();
        await rm(folder, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(folder, { recursive: true, force: true });
    throw error;
  }
}

/** Every file's spans, by server, then in the order of the local rowids the file names carry. */
async function loadSpans(path: string, dir: string): Promise<void> {
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  try {
    await connection.run(`INSERT INTO spans BY NAME
      SELECT * EXCLUDE (date, hour, server, filename, file_row_number)
      FROM read_parquet(${sqlText(join(dir, '**', '*.parquet'))}, hive_partitioning = true, hive_types_autocast = false,
        union_by_name = true, filename = true, file_row_number = true)
      ORDER BY server, CAST(regexp_extract(filename, 'part-(\\d+)-\\d+\\.parquet$', 1) AS BIGINT), file_row_number;
      CHECKPOINT;`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
