import type { DuckDBConnection, DuckDBPreparedStatement } from '@duckdb/node-api';
import { TableAppender, type Column, type ColumnarRows } from './columns.js';

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

/** A group's rows by table. */
type TableBatches = Map<string, { columns: readonly Column[]; batches: ColumnarRows[] }>;

interface Job {
  readonly writes: readonly TableRows[];
  readonly bytes: number;
  /** Work that needs the connection alone, between two commits (a checkpoint). */
  readonly alone?: (connection: DuckDBConnection) => Promise<void>;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/** The write queue is over its bound: the caller should retry later (HTTP 503 + Retry-After). */
export class StoreBusyError extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(`the store's write queue is full; retry in ${retryAfterSeconds} s`);
    this.name = 'StoreBusyError';
  }
}

export interface GroupCommitWriterOptions {
  /** Bytes (as the caller estimates them) that may wait for a commit before writes are refused. */
  readonly maxQueuedBytes: number;
  /**
   * Runs work with more memory than writes get (write-budget.ts): a group that ran out of
   * memory under the write budget (very large spans, or a large group's COMMIT) is committed
   * again inside it.
   */
  readonly withMoreMemory?: (work: () => Promise<void>) => Promise<void>;
}

/**
 * The one writer of the database. Every write waiting while a commit runs is appended in the
 * next transaction together (group commit), so durability costs one commit per group, not per
 * request. A write's promise settles after the commit that holds it: resolved means durable.
 * BEGIN and COMMIT run on DuckDB's threads, so the event loop keeps decoding meanwhile.
 */
export class GroupCommitWriter {
  private queue: Job[] = [];
  private queuedBytes = 0;
  private draining: Promise<void> | null = null;
  private closed = false;
  private readonly appenders = new Map<string, Promise<TableAppender>>();
  // Prepared once: a commit then costs no parsing or planning of BEGIN and COMMIT.
  private statements: Promise<{ begin: DuckDBPreparedStatement; commit: DuckDBPreparedStatement }> | null = null;

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
      this.queue.push({ writes, bytes, resolve, reject });
      this.queuedBytes += bytes;
      this.draining ??= this.drain();
    });
  }

  /** Runs `work` on the writer's connection between two commits, with no write transaction open. */
  between(work: (connection: DuckDBConnection) => Promise<void>): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the store is closed'));
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ writes: [], bytes: 0, alone: work, resolve, reject });
      this.draining ??= this.drain();
    });
  }

  /** Waits for every accepted write to commit, then refuses new ones. */
  async close(): Promise<void> {
    this.closed = true;
    await this.draining;
    for (const appender of this.appenders.values()) (await appender).close();
  }

  private async drain(): Promise<void> {
    // Let the requests that arrive in this turn of the event loop join the first group.
    await new Promise<void>((resolve) => setImmediate(resolve));
    while (this.queue.length > 0) {
      // The writes up to the first job that needs the connection alone form the group.
      const alone = this.queue.findIndex((job) => job.alone);
      const group = alone === 0 ? this.queue.splice(0, 1) : this.queue.splice(0, alone === -1 ? this.queue.length : alone);
      try {
        if (group[0].alone) await group[0].alone(this.connection);
        else await this.commit(group);
        for (const job of group) job.resolve();
      } catch (error) {
        for (const job of group) job.reject(error);
      } finally {
        for (const job of group) this.queuedBytes -= job.bytes;
      }
    }
    this.draining = null;
  }

  private appenderFor(table: string, columns: readonly Column[]): Promise<TableAppender> {
    let appender = this.appenders.get(table);
    if (!appender) {
      appender = TableAppender.create(this.connection, table, columns);
      this.appenders.set(table, appender);
    }
    return appender;
  }

  private async commit(group: readonly Job[]): Promise<void> {
    const byTable: TableBatches = new Map();
    for (const job of group) {
      for (const w of job.writes) {
        if (w.rows.length === 0) continue;
        const entry = byTable.get(w.table) ?? { columns: w.columns, batches: [] };
        entry.batches.push(w.rows);
        byTable.set(w.table, entry);
      }
    }
    if (byTable.size === 0) return;
    try {
      await this.commitTables(byTable);
    } catch (error) {
      const { withMoreMemory } = this.options;
      if (!withMoreMemory || !OUT_OF_MEMORY.test(String((error as Error).message))) throw error;
      await withMoreMemory(() => this.commitTables(byTable));
    }
  }

  private async commitTables(byTable: TableBatches): Promise<void> {
    this.statements ??= Promise.all([this.connection.prepare('BEGIN TRANSACTION'), this.connection.prepare('COMMIT')]).then(
      ([begin, commit]) => ({ begin, commit }),
    );
    const { begin, commit } = await this.statements;
    await begin.run();
    try {
      for (const [table, { columns, batches }] of byTable) {
        (await this.appenderFor(table, columns)).append(batches);
      }
      await commit.run();
    } catch (error) {
      await this.connection.run('ROLLBACK').catch(() => {});
      throw error;
    }
  }
}
