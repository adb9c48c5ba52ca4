import type { DuckDBConnection } from '@duckdb/node-api';
import { StoreUnavailableError } from '../api/errors.js';
import { WATERMARK } from '../sql/derived.js';
import { deriveSpans } from './deriver.js';
import type { CheckpointResult, DuckDBFile } from './duckdb-file.js';
import { MOVED_LOGS, MOVED_SPANS, type MovedTable } from './fleet-views.js';
import type { SpanWriteListener } from './ingest.js';
import { DEFAULT_MAINTAIN_UNDER_LOAD_AFTER_MS, DEFAULT_SPANS_MOVE_EVERY_MS, type StoreOptions } from './options.js';
import type { ServerLightningStore } from './server-lightning.js';
import { type MoveHooks, type MoveSink, type SpanMoveLag, TableMover } from './span-files.js';

/** How often the LightningStore's watchdog runs: attempts time out even when nobody asks. */
const WATCHDOG_EVERY_MS = 1000;
/** How long no span may have been written before the idle work runs, when the options do not say. */
const DEFAULT_IDLE_MS = 250;
/** Spans one round of the deriver covers. */
const DERIVE_ROUND_SPANS = 20_000;
/** The longest a few spans wait for the deriver (before the round that takes them starts). */
const DERIVE_EVERY_MS = 5_000;
/** WAL size from which an idle store checkpoints. */
const IDLE_CHECKPOINT_BYTES = 16 * 2 ** 20;
/**
 * WAL size from which a store under load checkpoints. Larger than idle: a checkpoint costs
 * ingest CPU and slows the commits beside it, so under load it runs less often, on more rows.
 */
const LOADED_CHECKPOINT_BYTES = 64 * 2 ** 20;
/** Turns in a row that retry a refused checkpoint before a due round runs (2 s at 250 ms). */
const CHECKPOINT_TRIES_BEFORE_ROUND = 8;
/**
 * Spans waiting for the deriver from which, under load, its rounds run back to back. Below it
 * the deriver rests after a round in proportion: at no backlog as long as the round took (half
 * the time), so that ingest outpacing the deriver makes it take more of the time, not fall
 * behind without bound.
 */
const FULL_DUTY_BACKLOG_SPANS = 5 * DERIVE_ROUND_SPANS;
/** Spans one Parquet file of a move holds at most. */
const SPANS_MOVE_BATCH_ROWS = 200_000;

/**
 * The store's work beside the requests, on one schedule:
 * - every second, the LightningStore's watchdog;
 * - every deriveWhenIdleMs, a checkpoint of a large WAL (which frees the memory the WAL's rows
 *   hold), else a round of the deriver when one is due. Once no span has been written for that
 *   long (idle), from IDLE_CHECKPOINT_BYTES and as soon as a round is due. Under load (a span
 *   written within that time) that lasted maintainUnderLoadAfterMs too, so that neither the WAL
 *   nor the spans reads must derive on the fly grow without end: from LOADED_CHECKPOINT_BYTES,
 *   and a round after a rest that shrinks as the backlog grows (restAfterRound).
 *   Ingest waits for neither, and reads are complete meanwhile;
 * - with a span directory, every spansMoveEveryMs, a move of the spans and log records there.
 * Deriver rounds and deletes of moved spans change the same tables: they run one after another
 * on a connection of their own.
 */
export class Maintenance implements SpanWriteListener {
  private readonly timers: NodeJS.Timeout[] = [];
  private closing = false;
  /** The watchdog's failure was said (it runs every second: said once). */
  private watchdogErrorShown = false;
  /** The scheduled checkpoint, or the check for one, in progress. */
  private scheduledStep: Promise<void> | null = null;
  private lastSpanWrite = 0;
  /** Checkpoints refused in a row (DuckDBFile.checkpointIfLarge). */
  private refusedCheckpoints = 0;
  /** When the load in progress began (no idle turn of the schedule since); Infinity while idle. */
  private loadedSince = Number.POSITIVE_INFINITY;
  private readonly maintainUnderLoadAfterMs: number;
  /** The deriver's round, or a delete of moved spans, in progress. */
  private deriving: Promise<unknown> | null = null;
  private deriveConnection: DuckDBConnection | undefined;
  /** Spans committed since the last derive round began, and when it began. */
  private spansSinceRound = 0;
  /** Spans committed and not derived yet, as far as this server saw them (its backlog). */
  private spansWaiting = 0;
  private lastRoundStart = 0;
  /** How long the last round took, and when it ended. */
  private lastRoundMs = 0;
  private lastRoundEnd = 0;
  /** The last round stopped at its size, so more spans wait (on open: what the file holds may). */
  private roundWasFull = true;
  /** Move spans and log records to the span directory (spansDir), and the move in progress. */
  private spanMover: TableMover | undefined;
  private logMover: TableMover | undefined;
  private moving: Promise<number> | null = null;

  constructor(
    private readonly file: DuckDBFile,
    private readonly options: StoreOptions,
  ) {
    file.beforeReopen = () => this.settle();
    this.maintainUnderLoadAfterMs = options.maintainUnderLoadAfterMs ?? DEFAULT_MAINTAIN_UNDER_LOAD_AFTER_MS;
  }

  /** Starts the schedule (the store is open and writable). */
  start(lightning: ServerLightningStore): void {
    this.every(WATCHDOG_EVERY_MS, () => void lightning.watchdog().catch((error) => this.watchdogFailed(error)));
    const idleMs = this.options.deriveWhenIdleMs ?? DEFAULT_IDLE_MS;
    if (Number.isFinite(idleMs)) this.every(idleMs, () => this.onSchedule(idleMs));
    const moveEveryMs = this.options.spansMoveEveryMs ?? DEFAULT_SPANS_MOVE_EVERY_MS;
    if (this.spanMover && Number.isFinite(moveEveryMs)) this.every(moveEveryMs, () => this.moveOnSchedule());
  }

  private every(ms: number, work: () => void): void {
    const timer = setInterval(work, ms);
    timer.unref();
    this.timers.push(timer);
  }

  private onSchedule(idleMs: number): void {
    this.file.settleBudget();
    const now = Date.now();
    const idle = now - this.lastSpanWrite >= idleMs;
    if (idle) this.loadedSince = Number.POSITIVE_INFINITY;
    else this.loadedSince = Math.min(this.loadedSince, now);
    if (this.deriving || this.scheduledStep || this.closing) return;
    // A burst shorter than the grace runs at full speed: its WAL and backlog wait for the idle
    // time after it (DuckDB's own checkpoint threshold and the write budget bound them meanwhile).
    if (!idle && now - this.loadedSince < this.maintainUnderLoadAfterMs) return;
    const deriveDue = this.deriveDue() && (idle || now - this.lastRoundEnd >= this.restAfterRound());
    this.scheduledStep = this.checkpointIfLarge(idle ? IDLE_CHECKPOINT_BYTES : LOADED_CHECKPOINT_BYTES)
      .then((checkpoint) => {
        // A refused checkpoint is tried again at the next turn, rather than after a round that
        // may take seconds, unless that has gone on so long that the rounds would starve.
        this.refusedCheckpoints = checkpoint === 'refused' ? this.refusedCheckpoints + 1 : 0;
        const retrySoon = checkpoint === 'refused' && this.refusedCheckpoints % CHECKPOINT_TRIES_BEFORE_ROUND !== 0;
        if (checkpoint === 'done' || retrySoon || this.closing || !deriveDue) return;
        this.deriveRound(DERIVE_ROUND_SPANS).catch((error) => {
          // Reads stay complete (the views derive what is missing); retried after the next write.
          this.roundWasFull = false;
          console.error(
            `agl: deriving the stored spans failed (queries stay complete, only slower): ${(error as Error).message}`,
          );
        });
      })
      .finally(() => (this.scheduledStep = null));
  }

  /**
   * Checkpoints the WAL from `minBytes` on the deriver's connection: checkpoints, rounds and
   * deletes of moved spans then never overlap. While the file is opened again no connection
   * can be had: the next turn tries again.
   */
  private checkpointIfLarge(minBytes: number): Promise<CheckpointResult> {
    if (this.options.readOnly) return Promise.resolve('small');
    return this.onDeriveConnection<CheckpointResult>('small', (connection) =>
      this.file.checkpointIfLarge(connection, minBytes),
    ).catch(() => 'refused');
  }

  private moveOnSchedule(): void {
    if (this.moving || this.closing) return;
    this.moveSpans().catch((error) =>
      console.error(`agl: moving spans to ${this.options.spansDir} failed, retried later: ${(error as Error).message}`),
    );
  }

  private watchdogFailed(error: unknown): void {
    if (error instanceof StoreUnavailableError || this.watchdogErrorShown) return; // said by the file's writeFailed
    this.watchdogErrorShown = true;
    console.error(`agl: the attempts' watchdog failed (${(error as Error).message}); further failures are not shown`);
  }

  spansWriting(): void {
    this.lastSpanWrite = Date.now();
  }

  spansCommitted(count: number): void {
    this.spansSinceRound += count;
    this.spansWaiting += count;
    this.spanMover?.noteCommitted(count);
  }

  /**
   * Derives every stored span not derived yet (the schedule does it by itself, a round at a
   * time; this is for a caller that wants it now). Returns how many spans it derived.
   */
  async deriveAll(): Promise<number> {
    let total = 0;
    for (let n = -1; n !== 0; total += n) n = await this.deriveRound(DERIVE_ROUND_SPANS);
    return total;
  }

  /**
   * Whether the schedule should derive now. A round costs tens of milliseconds of CPU however
   * few spans it covers (an app exporting every half second would pay that twice a second), so
   * a few spans wait up to DERIVE_EVERY_MS; reads derive them on the fly meanwhile.
   */
  private deriveDue(): boolean {
    if (!this.roundWasFull && this.spansSinceRound === 0) return false; // nothing waits
    return (
      this.roundWasFull ||
      this.spansSinceRound >= DERIVE_ROUND_SPANS ||
      Date.now() - this.lastRoundStart >= DERIVE_EVERY_MS
    );
  }

  /**
   * How long the deriver rests under load after a round: as long as the round took while little
   * waits (ingest keeps at least half the time), down to none from FULL_DUTY_BACKLOG_SPANS.
   */
  private restAfterRound(): number {
    return this.lastRoundMs * Math.max(0, 1 - this.spansWaiting / FULL_DUTY_BACKLOG_SPANS);
  }

  /** Runs one round after the one in progress, if any (rounds never overlap). */
  private deriveRound(maxSpans: number): Promise<number> {
    if (this.options.readOnly) return Promise.resolve(0);
    return this.onDeriveConnection(0, async (connection) => {
      this.lastRoundStart = Date.now();
      this.spansSinceRound = 0;
      const derived = await this.file.read(() => deriveSpans(connection, maxSpans));
      // A round short of its size took all there was: the schedule rests until spans are committed.
      this.roundWasFull = derived === maxSpans;
      this.spansWaiting = Math.max(0, this.spansWaiting - derived);
      // All that was committed before the round began is derived; what came during it may be.
      if (!this.roundWasFull) this.spansWaiting = Math.min(this.spansWaiting, this.spansSinceRound);
      this.lastRoundEnd = Date.now();
      this.lastRoundMs = this.lastRoundEnd - this.lastRoundStart;
      return derived;
    });
  }

  /**
   * Runs `work` on the deriver's connection after the work in progress there, if any: rounds and
   * the deletes of moved spans change the same tables, so they never overlap. Once the store
   * closes, answers `closed` without running it. A failure closes the connection.
   */
  private onDeriveConnection<T>(closed: T, work: (connection: DuckDBConnection) => Promise<T>): Promise<T> {
    const step = (this.deriving ?? Promise.resolve())
      .catch(() => {})
      .then(async () => {
        if (this.closing) return closed;
        this.deriveConnection ??= await this.file.connect();
        try {
          return await work(this.deriveConnection);
        } catch (error) {
          this.deriveConnection.closeSync();
          this.deriveConnection = undefined;
          throw error;
        }
      });
    this.deriving = step;
    // The failure goes to the caller through `step`; this copy of it is nobody's.
    void step
      .finally(() => {
        if (this.deriving === step) this.deriving = null;
      })
      .catch(() => {});
    return step;
  }

  /** Readies the moves of this file's spans and log records to the span directory (span-files.ts). */
  async openMovers(dir: string, serverId: string): Promise<void> {
    // Spans move once derived: a file holds what the deriver made of them (fleet-views.ts).
    const derived = async () => {
      await this.deriveAll();
      return Number((await this.file.query(`SELECT ${WATERMARK} AS n`, false)).rows[0].n);
    };
    this.spanMover = await TableMover.open(
      dir,
      serverId,
      MOVED_SPANS,
      this.moveSink(MOVED_SPANS, derived),
      SPANS_MOVE_BATCH_ROWS,
    );
    const logSink = this.moveSink(MOVED_LOGS, () => logSink.lastCommitted());
    this.logMover = await TableMover.open(dir, serverId, MOVED_LOGS, logSink, SPANS_MOVE_BATCH_ROWS);
  }

  /** What a mover of `kind` needs of the store; it may move rows through `movableThrough`. */
  private moveSink(kind: MovedTable, movableThrough: () => Promise<number>): MoveSink {
    return {
      lastCommitted: async () =>
        Number(
          (await this.file.query(`SELECT coalesce(max(commit_seq), -1) AS n FROM main.${kind.table}`, false)).rows[0].n,
        ),
      movableThrough,
      copyToParquet: (sql, path) => this.file.copyToParquet(sql, path, kind.rowGroupRows),
      // On the deriver's connection: a delete of spans changes the derived tables too.
      deleteThrough: (through) =>
        this.onDeriveConnection(undefined, async (connection) => {
          await this.file.read(() => connection.run(kind.deleteSql(through)));
        }),
    };
  }

  /** How far the span directory is behind, with one. */
  get spanMoveLag(): SpanMoveLag | undefined {
    return this.spanMover?.lag;
  }

  /**
   * Moves every span committed so far to the span directory, batch after batch, after the move
   * in progress, then the log records; returns how many spans it moved (0 without one).
   */
  moveSpans(hooks: MoveHooks = {}): Promise<number> {
    const mover = this.spanMover;
    if (!mover) return Promise.resolve(0);
    const move = (this.moving ?? Promise.resolve(0))
      .catch(() => 0)
      .then(async () => {
        const spans = await mover.moveAll(hooks);
        await this.logMover?.moveAll();
        return spans;
      });
    this.moving = move;
    void move
      .finally(() => {
        if (this.moving === move) this.moving = null;
      })
      .catch(() => {});
    return move;
  }

  /** Waits for the work on the deriver's connection and the scheduled step, and closes that connection. */
  private async settle(): Promise<void> {
    await this.deriving?.catch(() => {}); // its failure was reported to whoever started the round
    await this.scheduledStep;
    this.deriveConnection?.closeSync();
    this.deriveConnection = undefined;
  }

  /** Stops the schedule; what this server holds goes to the span directory first. */
  async close(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    // A failure leaves the rows in the file, moved by the next start.
    await this.moveSpans().catch((error) =>
      console.error(`agl: moving the last spans failed, moved at the next start: ${(error as Error).message}`),
    );
    this.closing = true;
    await this.settle();
  }
}
