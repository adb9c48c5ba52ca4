import type { ColumnarRows, Int64Column } from '../otlp/columns.js';
import { SPAN } from '../otlp/span-columns.js';

/** How long a rollout's counter is kept at least after its last use (at most twice as long). */
export const SEQUENCE_MEMORY_MS = 10 * 60_000;

/** The highest sequence id stored for each of `rolloutIds` that has spans. */
export type StoredSequenceIds = (rolloutIds: readonly string[]) => Promise<Map<string, number>>;

/**
 * The span sequence ids of each rollout: one counter per rollout, from 1, continued from the
 * stored spans.
 *
 * Counters are kept in two generations by time, as the span index keeps span identities: one
 * unused for 10 to 20 minutes is let go, and read again from the database (`prepare`) when its
 * rollout's spans come back. A server that ran for days held one counter per rollout it ever
 * numbered (70 bytes of heap each, 11 MB an hour at the soak's pace). Rollouts the store makes
 * with an id of its own (`begin`) start at 0 with no read: no span can name them before.
 * A write numbers its spans within seconds of `prepare` and commits them within seconds more,
 * far inside the window: a counter read back never misses spans numbered by the one let go.
 */
export class SequenceIds {
  private current = new Map<string, number>();
  private previous = new Map<string, number>();
  private since: number;

  constructor(
    private readonly stored: StoredSequenceIds,
    private readonly generationMs = SEQUENCE_MEMORY_MS,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.since = now();
  }

  /** A rollout the store just made with an id of its own: its counter starts at 0. */
  begin(rolloutId: string): void {
    this.turn();
    if (this.counter(rolloutId) === undefined) this.current.set(rolloutId, 0);
  }

  /** Reads the counters of `rolloutIds` that are not kept from the database: `next` and `assign` then have them. */
  async prepare(rolloutIds: Iterable<string>): Promise<void> {
    this.turn();
    const missing = new Set<string>();
    for (const id of rolloutIds) if (this.counter(id) === undefined) missing.add(id);
    if (missing.size === 0) return;
    const stored = await this.stored([...missing]);
    // Another write may have read and moved the same counter on meanwhile: the higher one holds.
    for (const id of missing) this.current.set(id, Math.max(this.counter(id) ?? 0, stored.get(id) ?? 0));
  }

  /** The next sequence id of a rollout (`prepare`d). */
  next(rolloutId: string): number {
    const next = this.kept(rolloutId) + 1;
    this.current.set(rolloutId, next);
    return next;
  }

  /**
   * Gives spans of a rollout without a sequence id the next ids of that rollout, in start-time
   * order; a span's own id moves its rollout's counter on. Its rollouts are `prepare`d.
   */
  assign(rows: ColumnarRows): void {
    const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
    const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
    for (let i = 0; i < rows.length; i++) {
      const rollout = rollouts[i];
      const explicit = sequence[i];
      if (rollout !== null && explicit !== null) this.current.set(rollout, Math.max(explicit, this.kept(rollout)));
    }
    for (const { row, rollout } of unnumberedSpans(rows)) sequence[row] = this.next(rollout);
  }

  /** Counters kept now. */
  get size(): number {
    return this.current.size + this.previous.size;
  }

  private kept(rolloutId: string): number {
    const last = this.counter(rolloutId);
    // A bug, not a condition to serve through: numbering from 0 would repeat stored ids.
    if (last === undefined) throw new Error(`the sequence counter of rollout ${rolloutId} was not prepared`);
    return last;
  }

  /** A rollout's counter, brought into the current generation. */
  private counter(rolloutId: string): number | undefined {
    const last = this.current.get(rolloutId);
    if (last !== undefined) return last;
    const older = this.previous.get(rolloutId);
    if (older === undefined) return undefined;
    this.previous.delete(rolloutId);
    this.current.set(rolloutId, older);
    return older;
  }

  /** Starts a new generation once the current one is generationMs old; the previous one is let go. */
  private turn(): void {
    if (this.now() - this.since < this.generationMs) return;
    this.previous = this.current;
    this.current = new Map();
    this.since = this.now();
  }
}

/** The rollout ids that `rows`' spans name. */
export function rolloutIdsOf(rows: ColumnarRows): Set<string> {
  const ids = new Set<string>();
  for (const id of rows.columns[SPAN.rollout_id] as (string | null)[]) if (id !== null) ids.add(id);
  return ids;
}

/** The spans of a rollout without a sequence id, in the order they are numbered: by start time. */
export function unnumberedSpans(rows: ColumnarRows): { row: number; rollout: string }[] {
  const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
  const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
  const start = (rows.columns[SPAN.start_time] as Int64Column).values;
  const unnumbered: { row: number; rollout: string }[] = [];
  for (let i = 0; i < rows.length; i++) {
    const rollout = rollouts[i];
    if (rollout !== null && sequence[i] === null) unnumbered.push({ row: i, rollout });
  }
  return unnumbered.sort((a, b) => (start[a.row] < start[b.row] ? -1 : start[a.row] > start[b.row] ? 1 : 0));
}
