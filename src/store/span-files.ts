/**
 * The span directory (`agl serve --spans-dir DIR`): every server moves the spans of its DuckDB
 * file, in the order they were committed, into Parquet files of a directory that all servers
 * share, partitioned hive-style: `date=YYYY-MM-DD/hour=HH/server=ID/part-<first>-<last>.parquet`
 * (the date and hour of the move, UTC), then deletes them from its file; its log records the
 * same way, as `logs-<first>-<last>.parquet` (MovedTable: fleet-views.ts). The schema `fleet`
 * (fleet-views.ts) reads every server's files plus the local rows not moved yet, so each span
 * is read exactly once on any server.
 *
 * The file name is the manifest: `<first>-<last>` is the range of `commit_seq` (the order the
 * server committed its spans in, which deletes do not renumber) the file holds. A move takes
 * spans the deriver has covered, so a file carries their derived rows too. It is written under a
 * temporary name (`.parquet.tmp`, which no reader globs) and renamed into place; the rename is
 * the move's commit. The views take the local rows after the highest `<last>` among this server's
 * files, and the delete that follows is only housekeeping: a server killed at any point neither
 * loses a span (its rows are still local until a file is in place) nor counts one twice (once
 * the file is in place its rows leave the local part). Leftover temporary files are removed, and
 * moved rows still in the file deleted, on start.
 */
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { MOVED_LOGS, MOVED_SPANS, type MovedTable } from './fleet-views.js';
import { sqlText } from '../sql/literals.js';

/** A server id as it may appear in a path. */
export const SERVER_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** `<prefix>-<first>-<last>.parquet`: the commit_seq range of a table's rows a file holds. */
const rangeFile = (prefix: string) => new RegExp(`^${prefix}-(\\d+)-(\\d+)\\.parquet$`);

/** Where the move of one server stands: rows committed locally but not in a file yet. */
export interface SpanMoveLag {
  readonly serverId: string;
  readonly rows: number;
  readonly seconds: number;
}

/** What a mover needs of the store, for its table. */
export interface MoveSink {
  /** The highest commit_seq committed (-1: none). */
  lastCommitted(): Promise<number>;
  /** The highest commit_seq a move may take (spans: derived first) (-1: none). */
  movableThrough(): Promise<number>;
  /** Writes the query's rows to a Parquet file; answers how many. */
  copyToParquet(sql: string, path: string): Promise<number>;
  /** Deletes the rows through a commit_seq, moved (MovedTable.deleteSql). */
  deleteThrough(through: number): Promise<void>;
}

/** Steps a test cuts a move off at (as a kill would): between the copy and the rename, and after it. */
export interface MoveHooks {
  readonly afterCopy?: () => Promise<void>;
  readonly afterRename?: () => Promise<void>;
}

const twoDigits = (n: number) => String(n).padStart(2, '0');

/** The partition folder of a move made at `now`. */
function partitionOf(dir: string, serverId: string, now: Date): string {
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

/** The highest commit_seq of a table this server moved (-1: none); removes its leftover temporary files. */
async function reconcile(dir: string, serverId: string, { prefix }: MovedTable): Promise<number> {
  const ranged = rangeFile(prefix);
  let last = -1;
  for (const partition of await partitions(dir)) {
    if (partition.server !== serverId) continue;
    for (const file of partition.files) {
      if (file.startsWith(`${prefix}-`) && file.endsWith('.tmp')) await rm(join(partition.path, file), { force: true });
      const range = ranged.exec(file);
      if (range) last = Math.max(last, Number(range[2]));
    }
  }
  return last;
}

/** Whether the directory holds a Parquet file (a server with it as --spans-dir writes one at start). */
export async function hasSpanFiles(dir: string): Promise<boolean> {
  return (await readdir(dir, { recursive: true }).catch(() => [])).some((name) => name.endsWith('.parquet'));
}

/**
 * Writes this server's empty file of a table (the columns only, `<prefix>-schema.parquet`), which
 * keeps the directory's glob of the table from ever matching nothing, which DuckDB refuses.
 */
async function writeSchemaFile(dir: string, serverId: string, kind: MovedTable, sink: MoveSink): Promise<void> {
  const schemaFile = join(partitionOf(dir, serverId, new Date(0)), `${kind.prefix}-schema.parquet`);
  await mkdir(join(schemaFile, '..'), { recursive: true });
  await sink.copyToParquet(`${kind.rowsSql(0, -1)} LIMIT 0`, schemaFile);
}

/**
 * Moves the rows of one table of one server into the directory, a batch at a time (see the
 * module's comment). A batch is one COPY on a read connection: ingest goes on meanwhile.
 */
export class TableMover {
  private caughtUpAt = Date.now();
  /**
   * The highest commit_seq committed: read on open, then counted by the writes (noteCommitted). A
   * batch's own read is not taken in: it may see rows whose write has not noted them yet.
   */
  private committedThrough = -1;

  private constructor(
    readonly dir: string,
    readonly serverId: string,
    private readonly kind: MovedTable,
    private movedThrough: number,
    private readonly sink: MoveSink,
    private readonly maxRows: number,
  ) {}

  /** Writes the table's schema file, cleans up after a move cut off, and reads where the move stands. */
  static async open(
    dir: string,
    serverId: string,
    kind: MovedTable,
    sink: MoveSink,
    maxRows: number,
  ): Promise<TableMover> {
    await writeSchemaFile(dir, serverId, kind, sink);
    const mover = new TableMover(dir, serverId, kind, await reconcile(dir, serverId, kind), sink, maxRows);
    // A server stopped between a move's rename and its delete: the delete is done now.
    if (mover.movedThrough >= 0) await sink.deleteThrough(mover.movedThrough);
    mover.committedThrough = await sink.lastCommitted();
    return mover;
  }

  /** Rows were committed locally (the lag counts them before the next batch reads them). */
  noteCommitted(rows: number): void {
    if (rows > 0 && this.committedThrough === this.movedThrough) this.caughtUpAt = Date.now();
    this.committedThrough += rows;
  }

  /** Moves one batch (the next maxRows commit_seq numbers, gaps included); returns how many rows it moved. */
  async moveBatch(hooks: MoveHooks = {}): Promise<number> {
    const last = await this.sink.movableThrough();
    if (last <= this.movedThrough) {
      this.caughtUpAt = Date.now();
      return 0;
    }
    const first = this.movedThrough + 1;
    const through = Math.min(last, this.movedThrough + this.maxRows);
    const folder = partitionOf(this.dir, this.serverId, new Date());
    await mkdir(folder, { recursive: true });
    const path = join(folder, `${this.kind.prefix}-${first}-${through}.parquet`);
    const moved = await this.sink.copyToParquet(this.kind.rowsSql(first, through), `${path}.tmp`);
    await hooks.afterCopy?.();
    await rename(`${path}.tmp`, path);
    this.movedThrough = through;
    if (through === last) this.caughtUpAt = Date.now();
    await hooks.afterRename?.();
    await this.sink.deleteThrough(through);
    return moved;
  }

  /** Moves batches until none is left (as of the call). */
  async moveAll(hooks: MoveHooks = {}): Promise<number> {
    let total = 0;
    for (let n = -1; n !== 0; total += n) n = await this.moveBatch(hooks);
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
    for (const partition of await partitions(dir))
      for (const { prefix, rowGroupRows } of [MOVED_SPANS, MOVED_LOGS]) {
        const ranged = rangeFile(prefix);
        const parts = partition.files.filter((file) => ranged.test(file));
        if (parts.length < 2) continue;
        const ranges = parts.map((file) => ranged.exec(file) as RegExpExecArray);
        const first = Math.min(...ranges.map((range) => Number(range[1])));
        const last = Math.max(...ranges.map((range) => Number(range[2])));
        const paths = parts.map((file) => join(partition.path, file));
        const target = join(partition.path, `${prefix}-${first}-${last}.parquet`);
        // Sorted and grouped as a move writes them (fleet-views.ts, MOVED_SPANS).
        const rowGroups = rowGroupRows === undefined ? '' : `, ROW_GROUP_SIZE ${rowGroupRows}`;
        await connection.run(
          `COPY (SELECT * FROM read_parquet([${paths.map(sqlText).join(', ')}], hive_partitioning = false, union_by_name = true)
            ORDER BY rollout_id, commit_seq)
         TO ${sqlText(`${target}.tmp`)} (FORMAT parquet${rowGroups})`,
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
