import type { DuckDBConnection } from '@duckdb/node-api';

/**
 * DuckDB's memory limit, switched between two values. DuckDB keeps committed rows in memory
 * until a checkpoint writes them into the file, and the store checkpoints only while idle
 * (store.ts), so under sustained ingest that memory would grow with the WAL (600 MB per million
 * small spans). While no read runs, the limit is the small write budget and DuckDB moves those
 * rows to its temporary folder (`<file>.tmp`) instead, at no measurable cost to ingest. A read
 * (a query, an export, a derive round, a checkpoint) lifts it to the read limit while it runs:
 * joins and sorts need room (triplets computed over 100,000 rollouts fail under 256 MB).
 */
export class MemoryBudget {
  private reads = 0;
  private applied: string | null = null;
  /** The last setting queued: settings run one after another, each for the state it finds. */
  private applying: Promise<void> = Promise.resolve();

  private constructor(
    private readonly connection: DuckDBConnection,
    private readonly writeLimit: string,
    private readonly readLimit: string,
  ) {}

  /** Applies `writeBytes` now; reads get the limit DuckDB had (its default: 80% of the RAM). */
  static async open(connection: DuckDBConnection, writeBytes: number): Promise<MemoryBudget> {
    const reader = await connection.runAndReadAll("SELECT current_setting('memory_limit')");
    const budget = new MemoryBudget(connection, `${Math.ceil(writeBytes / 1024)}KiB`, String(reader.getRows()[0][0]));
    await budget.settle();
    return budget;
  }

  /** Raises the limit for a read until the returned function is called (once). */
  async startRead(): Promise<() => void> {
    this.reads++;
    await this.settle();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.reads--;
      void this.settle();
    };
  }

  /** Runs `read` with the read limit. */
  async whileReading<T>(read: () => Promise<T>): Promise<T> {
    const end = await this.startRead();
    try {
      return await read();
    } finally {
      end();
    }
  }

  async close(): Promise<void> {
    await this.applying;
    this.connection.closeSync();
  }

  /** Sets the limit the store's state calls for (a no-op when it is set already). */
  settle(): Promise<void> {
    this.applying = this.applying.then(async () => {
      const limit = this.reads > 0 ? this.readLimit : this.writeLimit;
      if (limit === this.applied) return;
      try {
        await this.connection.run(`SET memory_limit = '${limit}'`);
        this.applied = limit;
      } catch {
        // DuckDB could not free that much right now (memory pinned by a write in progress):
        // the limit stays as it was until the next settle (the store's idle timer calls it).
      }
    });
    return this.applying;
  }
}
