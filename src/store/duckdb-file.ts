import { stat } from 'node:fs/promises';
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { StoreUnavailableError } from '../api/errors.js';
import { nextCommitSeqSql } from './fleet-views.js';
import { holdNativeMemoryWatch } from './native-memory.js';
import {
  DEFAULT_MAX_QUEUED_BYTES,
  DEFAULT_QUERY_TIMEOUT_MS,
  DEFAULT_WRITE_MEMORY_BYTES,
  defaultMemoryLimitBytes,
  type StoreOptions,
} from './options.js';
import type { ExportFormat, QueryResult } from '../api/query.js';
import { exportQuery, runQuery, streamQuery, type ReadSettings } from './query.js';
import { memoryLimitSetting, WriteBudget } from './write-budget.js';
import { GroupCommitWriter, writeError, type TableRows } from './writer.js';

/** What a try to checkpoint a large WAL did (DuckDBFile.checkpointIfLarge). */
export type CheckpointResult = 'done' | 'small' | 'refused';

/**
 * The DuckDB file: its instance, the writer's connection with group commit, the write budget,
 * and reads on connections of their own. Writes that fail for the disk's or the file's sake
 * are noted (the store's health); when DuckDB invalidated the instance (a checkpoint that
 * could not write), the next write opens the file again first.
 */
export class DuckDBFile {
  private writer: GroupCommitWriter;
  /** What DuckDB may use while writes run (none for a read-only store). */
  private budget: WriteBudget | undefined;
  /** Why the last write failed for the disk's or the file's sake (null: the last write succeeded). */
  private writeFailure: string | null = null;
  /** DuckDB invalidated the database: the next write opens it again first (see `reopen`). */
  private invalidated = false;
  private reopening: Promise<void> | null = null;
  private closing = false;
  /**
   * How reads are set up: with a span directory, names resolve in its schema first
   * (fleet-views.ts); `caughtUpSchema`, the derived-only views (src/sql/derived.ts,
   * DERIVED_ONLY_SCHEMA) first, which reads use while every span is derived; `noLogEvents`,
   * the log-event views of no rows (NO_LOG_EVENTS_SCHEMA) first while no GenAI log event is
   * stored; `setup`, for a file an older agl wrote, opened read-only: what it lacks, as
   * temporary macros and views (with a span directory: DuckDB's settings for its files).
   */
  reads: ReadSettings = {};
  /** Settles the work on other connections of the instance (the deriver's) before it is replaced. */
  beforeReopen: () => Promise<void> = () => Promise.resolve();
  /** Ends this file's hold on the process's watch of the memory behind DuckDB's JS objects. */
  private readonly releaseMemoryWatch = holdNativeMemoryWatch();

  private constructor(
    readonly path: string,
    private instance: DuckDBInstance,
    private writerConnection: DuckDBConnection,
    private readonly options: StoreOptions,
  ) {
    this.writer = this.newWriter();
  }

  static async open(options: StoreOptions): Promise<DuckDBFile> {
    const instance = await DuckDBInstance.create(options.path, instanceSettings(options));
    try {
      return new DuckDBFile(options.path, instance, await instance.connect(), options);
    } catch (error) {
      instance.closeSync();
      throw error;
    }
  }

  private newWriter(): GroupCommitWriter {
    return new GroupCommitWriter(this.writerConnection, {
      maxQueuedBytes: this.options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES,
      counters: { spans: { nextSql: nextCommitSeqSql('spans') }, logs: { nextSql: nextCommitSeqSql('logs') } },
      withMoreMemory: (work) => this.read(work),
      // A quarter of the budget: a COMMIT under the budget failed for memory from 70% of it.
      commitWithMoreMemoryBytes:
        this.options.commitWithMoreMemoryBytes ?? (this.options.writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES) / 4,
    });
  }

  /** The writer's connection, for what runs before the first write (migrations, loading the hot state). */
  get connection(): DuckDBConnection {
    return this.writerConnection;
  }

  /** A connection of its own to the instance open now. */
  connect(): Promise<DuckDBConnection> {
    return this.instance.connect();
  }

  /** True while the write queue is full: new writes would get StoreBusyError. */
  get busy(): boolean {
    return this.writer.full;
  }

  /** Why writes fail for the disk's or the file's sake (null: they do not). */
  get failure(): string | null {
    return this.writeFailure;
  }

  /** From now on writes run under the write budget (write-budget.ts). */
  async startWriteBudget(): Promise<void> {
    this.budget = await WriteBudget.open(
      await this.instance.connect(),
      this.options.writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES,
      memoryLimitOf(this.options),
    );
  }

  /** Puts the write budget back once no write has come for a while (write-budget.ts). */
  settleBudget(): void {
    void this.budget?.settle();
  }

  /** Hands rows to the writer, under the write budget; resolves once they are committed. */
  async write(writes: readonly TableRows[], bytes: number): Promise<void> {
    await this.ensureOpen();
    this.budget?.noteWrite();
    try {
      await this.writer.write(writes, bytes);
      this.writeFailure = null;
    } catch (error) {
      if (error instanceof StoreUnavailableError) this.writeFailed(error.reason, error.invalidated);
      throw error;
    }
  }

  /** Runs `work` on the writer's connection between two group commits. */
  between(work: (connection: DuckDBConnection) => Promise<void>): Promise<void> {
    return this.writer.between(work);
  }

  /** Opens the database again when DuckDB invalidated it; StoreUnavailableError while it cannot. */
  async ensureOpen(): Promise<void> {
    if (!this.invalidated) return;
    if (!this.closing) this.reopening ??= this.reopen().finally(() => (this.reopening = null));
    await this.reopening;
    if (this.invalidated)
      throw new StoreUnavailableError(this.writeFailure ?? 'the database could not be opened again', true);
  }

  /** Notes why the disk or the file failed, once per failure spell; opens an invalidated database again. */
  private writeFailed(reason: string, invalidated: boolean): void {
    if (this.writeFailure === null)
      console.error(`agl: the store cannot write (${reason}); writes get 503 until it can again`);
    this.writeFailure = reason;
    this.invalidated ||= invalidated;
  }

  /**
   * Opens the database again after DuckDB invalidated it (a checkpoint that could not write): every
   * statement of the old instance fails from then on. What was committed is in the file or its
   * WAL, which the new instance replays; the state in memory (span keys, sequence ids, rollouts)
   * holds exactly the committed writes, so it stays. Should the opening fail too (the disk still
   * full), the next write tries again.
   */
  private async reopen(): Promise<void> {
    // Waits for the writes in flight: they fail with the instance, each with its 503.
    await this.writer.close();
    await this.beforeReopen();
    await this.budget?.close();
    this.budget = undefined;
    this.writerConnection.closeSync();
    this.instance.closeSync();
    try {
      this.instance = await DuckDBInstance.create(this.path, instanceSettings(this.options));
      this.writerConnection = await this.instance.connect();
      await this.startWriteBudget();
      this.writer = this.newWriter();
      this.invalidated = false;
      console.error('agl: the store opened its database again after a fatal write error');
    } catch (error) {
      this.writeFailure = `the database could not be opened again: ${(error as Error).message.split('\n')[0]}`;
    }
  }

  /** Runs a read (or a checkpoint) with the write budget lifted (write-budget.ts). */
  read<T>(work: () => Promise<T>): Promise<T> {
    return this.budget ? this.budget.whileReading(work) : work();
  }

  /** A query, its rows as JSON values; `guard` refuses anything but one read of the store's tables (read-only-sql.ts). */
  query(sql: string, guard: boolean): Promise<QueryResult> {
    return this.read(() =>
      runQuery(this.instance, sql, {
        timeoutMs: this.options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
        maxRows: this.options.maxQueryRows ?? 100_000,
        guard,
        ...this.reads,
      }),
    );
  }

  /** The rows of a query batch by batch, with no row or time limit. */
  async *stream(sql: string, guard: boolean, typedLists = false): AsyncGenerator<Record<string, unknown>[]> {
    const endRead = await this.budget?.startRead();
    try {
      yield* streamQuery(this.instance, sql, {
        guard,
        ...this.reads,
        typedLists,
      });
    } finally {
      endRead?.();
    }
  }

  /** Writes a query's rows to a file (COPY); returns how many. */
  export(
    sql: string,
    path: string,
    format: ExportFormat,
    options: { guard: boolean; onProgress?: (fraction: number) => void },
  ): Promise<number> {
    return this.read(() =>
      exportQuery(this.instance, sql, path, format, {
        timeoutMs: this.options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
        guard: options.guard,
        ...this.reads,
        onProgress: options.onProgress,
      }),
    );
  }

  /**
   * Writes the store's own SQL over this file's tables (not the span directory's) to Parquet, with
   * no time limit, in row groups of `rowGroupRows` (default: DuckDB's).
   */
  copyToParquet(sql: string, path: string, rowGroupRows?: number): Promise<number> {
    return this.read(() =>
      exportQuery(this.instance, sql, path, 'parquet', {
        timeoutMs: Number.POSITIVE_INFINITY,
        guard: false,
        rowGroupRows,
      }),
    );
  }

  /**
   * Checkpoints the WAL into the file on `connection` when it holds `minBytes` or more: `done`,
   * `small` (no need), or `refused`. DuckDB (1.5) refuses a CHECKPOINT while a transaction
   * holds its checkpoint lock: one that writes, and one that committed but that a read begun
   * before its commit still sees. Under load that is most of the time (8 of 11 tries in the
   * soak), so the caller tries again soon. Not FORCE CHECKPOINT: it holds back every new
   * transaction until those end, and one of them may wait for a new one (the server hung in
   * the soak). Commits wait for a checkpoint that runs (a writer of 2,000-row groups stalled
   * for all of a 1.2-2.0 s checkpoint of a 20-46 MB WAL), so its length is what a write may wait.
   */
  async checkpointIfLarge(connection: DuckDBConnection, minBytes: number): Promise<CheckpointResult> {
    const wal = await stat(`${this.path}.wal`).catch(() => null);
    if (!wal || wal.size < minBytes) return 'small';
    return this.read(() => connection.run('CHECKPOINT')).then(
      () => 'done',
      (error) => {
        const failed = writeError(error);
        if (failed instanceof StoreUnavailableError) this.writeFailed(failed.reason, failed.invalidated);
        return 'refused';
      },
    );
  }

  /** Closes an instance that failed to open as a store (nothing was written through it). */
  abandon(): void {
    this.releaseMemoryWatch();
    this.instance.closeSync();
  }

  /** Commits everything accepted, checkpoints the WAL into the file (when writable) and closes it. */
  async close(): Promise<void> {
    this.closing = true;
    try {
      await this.reopening;
      await this.writer.close();
      if (!this.options.readOnly) {
        await this.read(() => this.writerConnection.run('CHECKPOINT')).catch((error: unknown) => {
          // Nothing is lost: the next open replays the WAL. But the user should know why it is large.
          console.error(
            `agl: the closing checkpoint failed, the WAL stays for the next open: ${(error as Error).message}`,
          );
        });
      }
      await this.budget?.close();
      this.writerConnection.closeSync();
      this.instance.closeSync();
    } finally {
      this.releaseMemoryWatch();
    }
  }
}

const memoryLimitOf = (options: StoreOptions) => options.memoryLimitBytes ?? defaultMemoryLimitBytes();

function instanceSettings(options: StoreOptions): Record<string, string> {
  // DuckDB's jemalloc gives freed pages back to the system only as its threads allocate again;
  // its background thread does it after a delay, so a server that goes quiet after a burst of
  // reads shrinks (4 rounds of 40 counts of llm_calls, RSS 6 s after each: 268-327 MB without,
  // 145-167 MB with; the GRPO batch unchanged). One setting for the process's allocator.
  const allocator = { allocator_background_threads: 'true' };
  // A checkpoint compresses what the WAL holds into the file and stalls the commits behind it:
  // at DuckDB's default 16 MB, ingest spends most of its time there (64 MB: 42,500 small spans/s
  // in process, 7,700 LLM-sized; no checkpoint: 60,500 and 15,200). So the store checkpoints by
  // itself (maintenance.ts: a WAL of 16 MB while idle, of 64 MB under load, beside the writer),
  // and DuckDB's own threshold is only the backstop.
  // A read-only store is a one-off command's (agl query --db): DuckDB's own limit, unless told.
  if (options.readOnly)
    return options.memoryLimitBytes === undefined
      ? { ...allocator, access_mode: 'READ_ONLY' }
      : { ...allocator, access_mode: 'READ_ONLY', memory_limit: memoryLimitSetting(options.memoryLimitBytes) };
  return {
    ...allocator,
    memory_limit: memoryLimitSetting(memoryLimitOf(options)),
    checkpoint_threshold: options.checkpointThreshold ?? '1GB',
  };
}
