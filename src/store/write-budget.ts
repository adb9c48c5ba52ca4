import type { DuckDBConnection } from '@duckdb/node-api';

/**
 * What DuckDB may use while only writes run, lifted while a read runs.
 *
 * Memory: DuckDB keeps committed rows in memory until a checkpoint writes them into the file,
 * and the store checkpoints only while idle (store.ts), so under sustained ingest that memory
 * would grow with the WAL (600 MB per million small spans). Under the write budget DuckDB moves
 * those rows to its temporary folder (`<file>.tmp`) instead, at no measurable cost to ingest.
 *
 * Threads: appends and commits use one thread; DuckDB's others only spun, on cores the decoders
 * and the event loop need (in-process ingest of small spans: +15% with one thread).
 *
 * A read (a query, an export, a derive round, a checkpoint) runs with DuckDB's defaults: joins
 * and sorts need the room (triplets computed over 100,000 rollouts fail under 256 MB) and the
 * cores.
 */
export class WriteBudget {
  private reads = 0;
  private applied: string | null = null;
  /** The last change queued: changes run one after another, each for the state it finds. */
  private applying: Promise<void> = Promise.resolve();

  private constructor(
    private readonly connection: DuckDBConnection,
    /** The statements that apply the budget, and that lift it. */
    private readonly writing: string,
    private readonly reading: string,
  ) {}

  /** Applies the write budget now (`memoryBytes`, one thread); reads get the settings DuckDB had. */
  static async open(connection: DuckDBConnection, memoryBytes: number): Promise<WriteBudget> {
    // Set back, not RESET: DuckDB 1.5's RESET memory_limit reports the default but keeps the limit.
    const reader = await connection.runAndReadAll("SELECT current_setting('threads'), current_setting('memory_limit')");
    const [threads, memory] = reader.getRows()[0].map(String);
    const budget = new WriteBudget(
      connection,
      `SET threads = 1; SET memory_limit = '${Math.ceil(memoryBytes / 1024)}KiB'`,
      `SET threads = ${Number(threads)}; SET memory_limit = '${memory.replace(/'/g, '')}'`,
    );
    await budget.settle();
    return budget;
  }

  /** Lifts the budget for a read until the returned function is called (once). */
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

  /** Runs `read` with the budget lifted. */
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

  /** Applies the settings the store's state calls for (nothing when they are applied already). */
  settle(): Promise<void> {
    this.applying = this.applying.then(async () => {
      const wanted = this.reads > 0 ? this.reading : this.writing;
      if (wanted === this.applied) return;
      try {
        await this.connection.run(wanted);
        this.applied = wanted;
      } catch {
        // DuckDB could not free that much memory right now (pinned by a write in progress): it
        // stays as it was until the next settle (the store's idle timer calls it).
      }
    });
    return this.applying;
  }
}
