import type { DuckDBConnection } from '@duckdb/node-api';

/**
 * What DuckDB may use while writes run, lifted while a read runs: applied at the first write
 * after reads, so that between writes the reads keep DuckDB's cache of the file.
 *
 * Memory: DuckDB keeps committed rows in memory until a checkpoint writes them into the file,
 * and under sustained ingest the store checkpoints a WAL only from 64 MB (maintenance.ts), so
 * that memory would grow with the WAL (600 MB per million small spans) between checkpoints. Under
 * the write budget DuckDB moves those rows to its temporary folder (`<file>.tmp`) instead, at no
 * measurable cost to ingest.
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
  /** A write came since the last read started: the budget applies once no read runs. */
  private writes = false;
  private applied: string | null = null;
  /** The settling in progress (`settling`), and whether the state changed since it last looked. */
  private applying: Promise<void> = Promise.resolve();
  private settling = false;
  private dirty = false;
  /** When DuckDB last refused to lower its limit (memory pinned by a write in progress). */
  private refusedAt = 0;

  private constructor(
    private readonly connection: DuckDBConnection,
    /** The statements that apply the budget, and that lift it. */
    private readonly writing: string,
    private readonly reading: string,
  ) {}

  /**
   * Applies the write budget now (`writeBytes`, one thread); reads get `readBytes` (the store's
   * memory limit, given exactly: DuckDB shows its setting rounded down, 5.8 GiB as "5.7 GiB")
   * and the threads DuckDB had.
   */
  static async open(connection: DuckDBConnection, writeBytes: number, readBytes: number): Promise<WriteBudget> {
    const reader = await connection.runAndReadAll("SELECT current_setting('threads')");
    const threads = Number(reader.getRows()[0][0]);
    const budget = new WriteBudget(
      connection,
      `SET threads = 1; SET memory_limit = '${memoryLimitSetting(writeBytes)}'`,
      // Memory first: the threads' statement then has the room it needs.
      `SET memory_limit = '${memoryLimitSetting(readBytes)}'; SET threads = ${threads}`,
    );
    budget.writes = true;
    await budget.settle();
    return budget;
  }

  /** A write is about to run: the budget applies (now, or once the reads running end). */
  noteWrite(): void {
    if (this.writes && (this.applied === this.writing || Date.now() - this.refusedAt < 1000)) return;
    this.writes = true;
    if (this.reads === 0) void this.settle();
  }

  /** Lifts the budget for a read until the returned function is called (once). */
  async startRead(): Promise<() => void> {
    this.reads++;
    this.writes = false;
    await this.settle();
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.reads--;
      if (this.reads === 0 && this.writes) void this.settle();
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
    this.dirty = true;
    if (!this.settling) {
      this.settling = true;
      this.applying = this.apply();
    }
    return this.applying;
  }

  private async apply(): Promise<void> {
    // Lifting for a read is tried twice: a statement can fail for want of memory before the
    // limit it sets is raised, and the read needs the room.
    let liftTries = 0;
    try {
      // No await between the last look at `dirty` and `settling` going false: a change made
      // meanwhile is never left unapplied.
      while (this.dirty) {
        this.dirty = false;
        const wanted = this.reads > 0 ? this.reading : this.writes ? this.writing : this.applied;
        if (wanted === this.applied || wanted === null) continue;
        try {
          await this.connection.run(wanted);
          this.applied = wanted;
        } catch {
          // Mostly DuckDB could not free that much memory right now. The statement may have
          // changed some settings before it failed, so what is applied is unknown: the next
          // settle applies its settings whatever they were (the idle timer; writes, a second on).
          this.applied = null;
          this.refusedAt = Date.now();
          if (wanted === this.reading && ++liftTries < 2) this.dirty = true;
        }
      }
    } finally {
      this.settling = false;
    }
  }
}

/** DuckDB's memory_limit for `bytes`, in KiB (its setting takes no plain byte count). */
export const memoryLimitSetting = (bytes: number) => `${Math.ceil(bytes / 1024)}KiB`;
