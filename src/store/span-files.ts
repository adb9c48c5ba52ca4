/**
 * The span directory (`agl serve --spans-dir DIR`): every server copies the spans of its DuckDB
 * file, in the order they were committed, into Parquet files of a directory that all servers
 * share, partitioned hive-style: `date=YYYY-MM-DD/hour=HH/server=ID/part-<first>-<last>.parquet`
 * (the date and hour of the move, UTC). The view `all_spans` reads every server's files plus
 * the local rows not moved yet, so each span is read exactly once on any server.
 *
 * The file name is the manifest: `<first>-<last>` is the range of local rowids the file holds
 * (rowids of `spans` only grow: spans are never deleted). A file is written under a temporary
 * name (`.parquet.tmp`, which no reader globs) and renamed into place; the rename is the move's
 * commit. The view takes the local rows after the highest `<last>` among this server's files, so
 * a server killed at any point neither loses a span (its rows are still local until a file is
 * in place) nor counts one twice (once the file is in place its rows leave the local part).
 * Leftover temporary files are removed on start.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { sqlText } from './sql.js';

/** A server id as it may appear in a path. */
export const SERVER_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** `part-<first>-<last>.parquet`: the rowids a file holds. */
const PART = /^part-(\d+)-(\d+)\.parquet$/;

/** Where the move of one server stands: rows committed locally but not in a file yet. */
export interface SpanMoveLag {
  readonly serverId: string;
  readonly rows: number;
  readonly seconds: number;
}

export interface SpanFileSink {
  /** The highest rowid of `spans` (-1: none). */
  lastRowid(): Promise<number>;
  /** Writes the query's rows to a Parquet file. */
  copyToParquet(sql: string, path: string): Promise<void>;
}

const twoDigits = (n: number) => String(n).padStart(2, '0');

/** The partition folder of a move made at `now`. */
export function partitionOf(dir: string, serverId: string, now: Date): string {
  const date = `${now.getUTCFullYear()}-${twoDigits(now.getUTCMonth() + 1)}-${twoDigits(now.getUTCDate())}`;
  return join(dir, `date=${date}`, `hour=${twoDigits(now.getUTCHours())}`, `server=${serverId}`);
}

/** Every partition folder of the directory, with the files in it. */
async function partitions(dir: string): Promise<{ path: string; server: string; files: string[] }[]> {
  const found: { path: string; server: string; files: string[] }[] = [];
  const children = async (path: string, prefix: string) =>
    (await readdir(path, { withFileTypes: true }).catch(() => [])).filter(
      (entry) => entry.isDirectory() && entry.name.startsWith(prefix),
    );
  for (const date of await children(dir, 'date='))
    for (const hour of await children(join(dir, date.name), 'hour='))
      for (const server of await children(join(dir, date.name, hour.name), 'server=')) {
        const path = join(dir, date.name, hour.name, server.name);
        found.push({ path, server: server.name.slice('server='.length), files: await readdir(path) });
      }
  return found;
}

/** The highest rowid this server moved (-1: none); removes its leftover temporary files. */
export async function reconcile(dir: string, serverId: string): Promise<number> {
  let last = -1;
  for (const partition of await partitions(dir)) {
    if (partition.server !== serverId) continue;
    for (const file of partition.files) {
      if (file.endsWith('.tmp')) await rm(join(partition.path, file), { force: true });
      const range = PART.exec(file);
      if (range) last = Math.max(last, Number(range[2]));
    }
  }
  return last;
}

/**
 * The view over all servers' spans. An empty file of this server (the schema only) keeps the
 * glob from ever matching nothing, which DuckDB refuses.
 */
export async function allSpansViewSql(dir: string, serverId: string, copy: SpanFileSink): Promise<string> {
  const schemaFile = join(partitionOf(dir, serverId, new Date(0)), 'schema.parquet');
  await mkdir(join(schemaFile, '..'), { recursive: true });
  await copy.copyToParquet('SELECT * FROM spans LIMIT 0', schemaFile);
  const own = join(dir, '*', '*', `server=${serverId}`, 'part-*.parquet');
  const moved = `(SELECT coalesce(max(CAST(regexp_extract(file, 'part-\\d+-(\\d+)\\.parquet$', 1) AS BIGINT)), -1) FROM glob(${sqlText(own)}))`;
  return `CREATE OR REPLACE VIEW all_spans AS
SELECT * EXCLUDE (date, hour) FROM read_parquet(${sqlText(join(dir, '**', '*.parquet'))}, hive_partitioning = true, hive_types_autocast = false, union_by_name = true)
UNION ALL BY NAME
SELECT *, ${sqlText(serverId)} AS server FROM spans WHERE rowid > ${moved}`;
}

/**
 * Moves the spans of one server into the directory, a batch at a time (see the module's
 * comment). A batch is one COPY on a read connection: ingest goes on meanwhile.
 */
export class SpanMover {
  private caughtUpAt = Date.now();
  /**
   * The highest rowid committed: read on open, then counted by the writes (noteCommitted). A
   * batch's own read is not taken in: it may see rows whose write has not noted them yet.
   */
  private committedThrough = -1;

  private constructor(
    readonly dir: string,
    readonly serverId: string,
    private movedThrough: number,
    private readonly sink: SpanFileSink,
    private readonly maxRows: number,
  ) {}

  static async open(dir: string, serverId: string, sink: SpanFileSink, maxRows: number): Promise<SpanMover> {
    const mover = new SpanMover(dir, serverId, await reconcile(dir, serverId), sink, maxRows);
    mover.committedThrough = await sink.lastRowid();
    return mover;
  }

  /** Spans were committed locally (the lag counts them before the next batch reads them). */
  noteCommitted(rows: number): void {
    if (rows > 0 && this.committedThrough === this.movedThrough) this.caughtUpAt = Date.now();
    this.committedThrough += rows;
  }

  /** Moves one batch (at most maxRows spans); returns how many spans it moved. */
  async moveBatch(hooks: { afterCopy?: () => Promise<void> } = {}): Promise<number> {
    const last = await this.sink.lastRowid();
    if (last <= this.movedThrough) {
      this.caughtUpAt = Date.now();
      return 0;
    }
    const first = this.movedThrough + 1;
    const through = Math.min(last, this.movedThrough + this.maxRows);
    const folder = partitionOf(this.dir, this.serverId, new Date());
    await mkdir(folder, { recursive: true });
    const path = join(folder, `part-${first}-${through}.parquet`);
    await this.sink.copyToParquet(
      `SELECT * FROM spans WHERE rowid BETWEEN ${first} AND ${through} ORDER BY rowid`,
      `${path}.tmp`,
    );
    await hooks.afterCopy?.();
    await rename(`${path}.tmp`, path);
    this.movedThrough = through;
    if (through === last) this.caughtUpAt = Date.now();
    return through - first + 1;
  }

  /** Moves batches until none is left (as of the call). */
  async moveAll(): Promise<number> {
    let total = 0;
    for (let n = -1; n !== 0; total += n) n = await this.moveBatch();
    return total;
  }

  /** The rows committed and not moved, and for how long there have been some. */
  get lag(): SpanMoveLag {
    const rows = Math.max(0, this.committedThrough - this.movedThrough);
    return { serverId: this.serverId, rows, seconds: rows === 0 ? 0 : (Date.now() - this.caughtUpAt) / 1000 };
  }
}

/**
 * Merges the files of each partition that holds more than one into one file, for every server:
 * written under a temporary name, renamed into place, then the small files removed. Until the
 * small files are gone (milliseconds), a reader that globs the folder reads both: its rows of
 * that partition count twice. Returns how many files it merged.
 */
export async function compactSpansDir(dir: string): Promise<number> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  let merged = 0;
  try {
    for (const partition of await partitions(dir)) {
      const parts = partition.files.filter((file) => PART.test(file));
      if (parts.length < 2) continue;
      const ranges = parts.map((file) => PART.exec(file) as RegExpExecArray);
      const first = Math.min(...ranges.map((range) => Number(range[1])));
      const last = Math.max(...ranges.map((range) => Number(range[2])));
      const paths = parts.map((file) => join(partition.path, file));
      const target = join(partition.path, `part-${first}-${last}.parquet`);
      await connection.run(
        `COPY (SELECT * FROM read_parquet([${paths.map(sqlText).join(', ')}], hive_partitioning = false, union_by_name = true))
         TO ${sqlText(`${target}.tmp`)} (FORMAT parquet)`,
      );
      await rename(`${target}.tmp`, target);
      for (const path of paths) if (path !== target) await rm(path, { force: true });
      merged += parts.length;
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
  return merged;
}
