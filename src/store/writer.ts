import type { DuckDBConnection, DuckDBPreparedStatement } from '@duckdb/node-api';
import { type CounterColumn, TableAppender } from './appender.js';
import type { Column, ColumnarRows } from '../otlp/columns.js';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';

/** Rows for one table, as handed to the writer. */
export interface TableRows {
  readonly table: string;
  readonly columns: readonly Column[];
  readonly rows: ColumnarRows;
}

// DuckDB says so in an "Out of Memory Error", as an append that "could not allocate", or as a
// COMMIT that "failed to pin block" (the rows it writes out must all be in memory at once); its
// messages for these suggest raising memory_limit.
const OUT_OF_MEMORY = /out of memory|could not allocate|failed to allocate|failed to pin|memory_limit/i;

// DuckDB could not write the file or its WAL: "Could not write file ...: No space left on device"
// (a failed COMMIT leaves the database as it was), or a FATAL error (a failed checkpoint), after
// which every statement says the database "has been invalidated" until it is opened again.
const WRITE_FAILURE =
  /no space left|disk is full|quota exceeded|could not (write|open|create|truncate|sync|fsync)|IO Error|invalidated|FATAL/i;
/** A FATAL error: DuckDB refuses every statement of this instance from now on. */
const INVALIDATED = /invalidated|FATAL/i;

/**
 * The error to answer for a failed write: StoreUnavailableError when the disk or file failed,
 * StoreBusyError when DuckDB's memory limit was reached even with the write budget lifted (reads
 * and other writes hold the memory now: a retry finds it free).
 */
export function writeError(error: unknown): unknown {
  if (error instanceof StoreUnavailableError || error instanceof StoreBusyError) return error;
  const message = String((error as Error)?.message ?? error);
  if (OUT_OF_MEMORY.test(message) && !INVALIDATED.test(message))
    return new StoreBusyError(
      1,
      `the store is out of memory for now (${firstLine(message)}; agl serve --memory-limit sets the limit)`,
    );
  if (!WRITE_FAILURE.test(message)) return error;
  return new StoreUnavailableError(firstLine(message), INVALIDATED.test(message));
}

// DuckDB's message holds the path, or its advice; the first line says what happened.
const firstLine = (message: string) => message.split('\n')[0].replace(/^[\w ]*Error: /, '');

/** BEGIN and COMMIT, prepared once: a commit then costs no parsing or planning of them. */
interface Statements {
  readonly begin: DuckDBPreparedStatement;
  readonly commit: DuckDBPreparedStatement;
}

interface Job {
  readonly writes: readonly TableRows[];
  readonly bytes: number;
  /** Work that needs the connection alone, between two commits (a checkpoint). */
  readonly alone?: (connection: DuckDBConnection) => Promise<void>;
  /** Its rows are in the appenders already (added while an earlier group committed). */
  staged: boolean;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Rows an appender may hold between two flushes before writes wait for their group instead:
 * DuckDB's appender flushes by itself at 204,800 rows, and that flush must not happen outside
 * the group's transaction.
 */
const MAX_STAGED_ROWS = 100_000;
/** Request bytes whose rows may be staged at once: a copy of them waits in the appenders' buffers. */
const MAX_STAGED_BYTES = 32 * 2 ** 20;
/**
 * From this many writes in the last group, the next group waits GATHER_MS for the writes of the
 * requests that group answered (see `gather`); fewer, and it commits at once.
 */
const GATHER_FROM_WRITES = 4;
const GATHER_MS = 2;

interface GroupCommitWriterOptions {
  /** Bytes (as the caller estimates them) that may wait for a commit before writes are refused. */
  readonly maxQueuedBytes: number;
  /**
   * Runs work with more memory than writes get (write-budget.ts): a group that ran out of
   * memory under the write budget (very large spans, or a large group's COMMIT) is committed
   * again inside it.
   */
  readonly withMoreMemory?: (work: () => Promise<void>) => Promise<void>;
  /**
   * Request bytes from which a group's COMMIT runs with more memory at once, not after failing
   * under the write budget: DuckDB (1.5.6) does not fully undo a COMMIT that ran out of memory
   * while writing its first vector. The columns written before the failure keep that vector's
   * values (DuckDB's CHECKPOINT then finds "column has 7048 rows, row group has 5000"), and every
   * later row of those columns sits one vector off its other columns: duplicated and lost span
   * ids in answered writes. Under a 16 MiB budget such COMMITs failed from groups of 11.5 MB on.
   */
  readonly commitWithMoreMemoryBytes?: number;
  /** Per table, a counter column the appender numbers rows in (TableAppender.create). */
  readonly counters?: Readonly<Record<string, CounterColumn>>;
}

/**
 * The one writer of the database. Every write waiting while a commit runs is committed in the
 * next transaction together (group commit), so durability costs one commit per group, not per
 * request. A write's promise settles after the commit that holds it: resolved means durable.
 * BEGIN and COMMIT run on DuckDB's threads, so the event loop keeps decoding meanwhile, and a
 * write that comes while a group commits has its rows added to the appenders at once (staged):
 * its own group then only flushes them into its transaction. Filling the appenders was about 40%
 * of a group's time between BEGIN and COMMIT, and the next group could not start before it.
 * Staged rows wait in the appenders' buffers, outside DuckDB's memory limit, so they are bounded
 * on their own (MAX_STAGED_BYTES).
 */
export class GroupCommitWriter {
  private queue: Job[] = [];
  private queuedBytes = 0;
  private draining: Promise<void> | null = null;
  private closed = false;
  /** No write is staged while a failed group is rolled back and retried. */
  private stagingPaused = false;
  /** Request bytes of the staged writes. */
  private stagedBytes = 0;
  private readonly creating = new Map<string, Promise<TableAppender>>();
  private readonly appenders = new Map<string, TableAppender>();
  private statements: Statements | undefined;
  /** Writes in the last group committed. */
  private lastGroupWrites = 0;
  /** Ends the wait of `gather` (once as many writes wait as the last group held). */
  private gathered: (() => void) | null = null;

  constructor(
    private readonly connection: DuckDBConnection,
    private readonly options: GroupCommitWriterOptions,
  ) {}

  /** True when a new write would be refused. */
  get full(): boolean {
    return this.queuedBytes >= this.options.maxQueuedBytes;
  }

  /**
   * Queues rows for the next commit. Writes of 0 bytes (the LightningStore's state changes, which
   * are small and already applied in memory) are never refused, so memory and file agree.
   */
  write(writes: readonly TableRows[], bytes: number): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the store is closed'));
    if (bytes > 0 && this.full) return Promise.reject(new StoreBusyError(1));
    return new Promise<void>((resolve, reject) => {
      const job: Job = { writes, bytes, staged: false, resolve, reject };
      this.stage(job);
      this.queue.push(job);
      this.queuedBytes += bytes;
      if (this.queue.length >= this.lastGroupWrites) this.gathered?.();
      this.draining ??= this.drain();
    });
  }

  /** Runs `work` on the writer's connection between two commits, with no write transaction open. */
  between(work: (connection: DuckDBConnection) => Promise<void>): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the store is closed'));
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ writes: [], bytes: 0, alone: work, staged: false, resolve, reject });
      this.draining ??= this.drain();
    });
  }

  /** Waits for every accepted write to commit, then refuses new ones. */
  async close(): Promise<void> {
    this.closed = true;
    await this.draining;
    for (const appender of this.appenders.values()) appender.close();
  }

  /**
   * Adds a write's rows to the appenders now, if it can join the next group that way: the staged
   * writes are always the first of the queue (the next group takes them all, and its flush holds
   * exactly their rows), their tables' appenders exist, and each appender stays under
   * MAX_STAGED_ROWS and all of them under MAX_STAGED_BYTES. Otherwise the rows are added when
   * their group commits.
   */
  private stage(job: Job): void {
    if (this.stagingPaused || this.stagedBytes + job.bytes > MAX_STAGED_BYTES) return;
    if (this.queue.length > 0 && !this.queue[this.queue.length - 1].staged) return;
    const staging: [TableAppender, ColumnarRows][] = [];
    for (const w of job.writes) {
      if (w.rows.length === 0) continue;
      const appender = this.appenders.get(w.table);
      if (appender === undefined || appender.pendingRows + w.rows.length > MAX_STAGED_ROWS) return;
      staging.push([appender, w.rows]);
    }
    try {
      for (const [appender, rows] of staging) appender.add([rows]);
      job.staged = true;
      this.stagedBytes += job.bytes;
    } catch {
      // The staged rows are dropped: every waiting write is added again when its group commits,
      // where a failure fails that group alone (or is retried, for memory).
      this.unstageAll();
    }
  }

  /** Drops every staged row: the waiting writes are added again when their group commits. */
  private unstageAll(): void {
    for (const appender of this.appenders.values()) appender.clear();
    for (const job of this.queue) job.staged = false;
    this.stagedBytes = 0;
  }

  private async drain(): Promise<void> {
    // Let the requests that arrive in this turn of the event loop join the first group.
    await new Promise<void>((resolve) => setImmediate(resolve));
    while (this.queue.length > 0) {
      const first = this.queue[0];
      let group: Job[] | null = null;
      try {
        if (first.alone) {
          group = this.queue.splice(0, 1);
          await first.alone(this.connection);
        } else if (first.writes.every((w) => w.rows.length === 0)) {
          // Nothing to commit (every span of the request was stored already): no transaction.
          group = this.queue.splice(0, 1);
          if (first.staged) this.stagedBytes -= first.bytes;
        } else {
          await this.gather();
          const statements = await this.begin();
          // From here to the COMMIT nothing awaits: a write that comes meanwhile waits for the next group.
          group = this.takeGroup((w) => this.appenders.has(w.table));
          this.lastGroupWrites = group.length;
          await this.commit(group, statements);
        }
        for (const job of group) job.resolve();
      } catch (error) {
        this.unstageAll();
        // A failure before the group was taken (an appender, BEGIN) fails the writes it was for.
        group ??= this.takeGroup(() => true);
        const answer = writeError(error);
        for (const job of group) job.reject(answer);
      }
      for (const job of group) this.queuedBytes -= job.bytes;
    }
    this.draining = null;
  }

  /**
   * Under load, waits up to GATHER_MS before a group until as many writes wait as the last group
   * held: clients answered by that commit send their next writes within a millisecond or two,
   * and a transaction costs DuckDB about 1.5 ms of CPU however few rows it holds (BEGIN, the
   * first append to each table, COMMIT), so the next group should take them too. With the 32
   * runners of the store benchmark: 0.46 commits per rollout without the wait, 0.32 with it.
   */
  private async gather(): Promise<void> {
    if (this.lastGroupWrites < GATHER_FROM_WRITES || this.queue.length >= this.lastGroupWrites) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, GATHER_MS);
      this.gathered = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.gathered = null;
  }

  /** Makes the appenders the waiting writes need, and opens a transaction. */
  private async begin(): Promise<Statements> {
    for (const job of this.queue)
      for (const w of job.writes) if (!this.appenders.has(w.table)) await this.appenderFor(w.table, w.columns);
    this.statements ??= {
      begin: await this.connection.prepare('BEGIN TRANSACTION'),
      commit: await this.connection.prepare('COMMIT'),
    };
    await this.statements.begin.run();
    return this.statements;
  }

  /** Flushes the group's staged rows into the open transaction, appends the rest and commits. */
  private async commit(group: readonly Job[], statements: Statements): Promise<void> {
    try {
      for (const appender of this.appenders.values()) appender.flush();
      this.append(group.filter((job) => !job.staged));
      const commit = async () => void (await statements.commit.run());
      const { withMoreMemory, commitWithMoreMemoryBytes = Infinity } = this.options;
      const bytes = group.reduce((sum, job) => sum + job.bytes, 0);
      await (withMoreMemory && bytes >= commitWithMoreMemoryBytes ? withMoreMemory(commit) : commit());
    } catch (error) {
      await this.retry(group, error, statements);
    }
  }

  /** Appends the rows of `jobs` to their tables' appenders, which `begin` made. */
  private append(jobs: readonly Job[]): void {
    for (const [table, batches] of batchesByTable(jobs)) {
      const appender = this.appenders.get(table);
      if (!appender) throw new Error(`no appender for table ${table}`);
      appender.append(batches);
    }
  }

  /**
   * The staged writes and the others after them, up to the first that needs the connection alone
   * or a table that `ready` refuses.
   */
  private takeGroup(ready: (write: TableRows) => boolean): Job[] {
    let end = 0;
    while (
      end < this.queue.length &&
      !this.queue[end].alone &&
      this.queue[end].writes.every((w) => w.rows.length === 0 || ready(w))
    )
      end++;
    this.stagedBytes = 0; // the staged writes are the queue's first: all of them are taken
    return this.queue.splice(0, end);
  }

  /**
   * After a failed group: rolls back, and commits the group again with more memory when it ran
   * out (very large spans, or a large group's COMMIT, under the write budget: write-budget.ts).
   * Writes staged meanwhile are added again when their group commits.
   */
  private async retry(group: readonly Job[], error: unknown, { begin, commit }: Statements): Promise<void> {
    this.stagingPaused = true;
    this.unstageAll();
    try {
      // A COMMIT that failed ended its transaction already: nothing is left to roll back then.
      await this.connection.run('ROLLBACK').catch(() => {});
      const { withMoreMemory } = this.options;
      if (!withMoreMemory || !OUT_OF_MEMORY.test(String((error as Error).message))) throw error;
      await withMoreMemory(() => this.checkTables());
      await withMoreMemory(async () => {
        await begin.run();
        try {
          this.append(group);
          await commit.run();
        } catch (again) {
          this.unstageAll();
          // As above: the failed statement may have ended the transaction itself.
          await this.connection.run('ROLLBACK').catch(() => {});
          throw again;
        }
      });
    } finally {
      this.stagingPaused = false;
    }
  }

  /**
   * After a COMMIT that ran out of memory: DuckDB (1.5.6) may have left it half undone, a column
   * one vector longer than its row group (see `commitWithMoreMemoryBytes`), and rows committed
   * after it would be stored misaligned. A checkpoint checks the tables: on such damage it fails
   * FATAL, the group fails with it (StoreUnavailableError, a 503) and the store opens the file
   * again, whose WAL holds only what was committed. Any other failure (a long query's
   * transaction keeps the checkpoint from running) leaves the check undone, as before it existed.
   */
  private async checkTables(): Promise<void> {
    try {
      await this.connection.run('CHECKPOINT');
    } catch (error) {
      if (INVALIDATED.test(String((error as Error).message))) throw error;
    }
  }

  private appenderFor(table: string, columns: readonly Column[]): Promise<TableAppender> {
    let appender = this.creating.get(table);
    if (!appender) {
      appender = TableAppender.create(this.connection, table, columns, this.options.counters?.[table]).then((made) => {
        this.appenders.set(table, made);
        return made;
      });
      this.creating.set(table, appender);
    }
    return appender;
  }
}

/** A group's rows by table, in the order of its writes. */
function batchesByTable(group: readonly Job[]): Map<string, ColumnarRows[]> {
  const byTable = new Map<string, ColumnarRows[]>();
  for (const job of group) {
    for (const w of job.writes) {
      if (w.rows.length === 0) continue;
      const batches = byTable.get(w.table);
      if (batches) batches.push(w.rows);
      else byTable.set(w.table, [w.rows]);
    }
  }
  return byTable;
}
