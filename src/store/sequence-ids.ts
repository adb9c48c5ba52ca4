import type { ColumnarRows, Int64Column } from '../otlp/columns.js';
import { SPAN } from '../otlp/span-columns.js';

/** The span sequence ids of each rollout (one counter per rollout, from 1), continued from the stored spans. */
export class SequenceIds {
  private readonly last = new Map<string, number>();

  /** The next sequence id of a rollout. */
  next(rolloutId: string): number {
    const next = (this.last.get(rolloutId) ?? 0) + 1;
    this.last.set(rolloutId, next);
    return next;
  }

  /**
   * Gives spans of a rollout without a sequence id the next ids of that rollout, in start-time
   * order; a span's own id moves its rollout's counter on.
   */
  assign(rows: ColumnarRows): void {
    const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
    const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
    for (let i = 0; i < rows.length; i++) {
      const rollout = rollouts[i];
      const explicit = sequence[i];
      if (rollout !== null && explicit !== null && explicit > (this.last.get(rollout) ?? 0))
        this.last.set(rollout, explicit);
    }
    for (const { row, rollout } of unnumberedSpans(rows)) sequence[row] = this.next(rollout);
  }

  /** Continues a rollout's counter from the highest id stored. */
  continueFrom(rolloutId: string, stored: number): void {
    this.last.set(rolloutId, stored);
  }
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
