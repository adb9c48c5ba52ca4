import { readFileSync } from 'node:fs';

/** One measured figure of `npm run bench`, held against its target. */
export interface Figure {
  readonly name: string;
  readonly value: number;
  readonly unit: string;
  /** e.g. ">= 60000" or "< 500". */
  readonly target: string;
}

/**
 * How large a run is: `full` measures; `smoke` runs every benchmark's code on tiny data, so that
 * a change that breaks a benchmark fails `npm test` (its figures measure nothing).
 */
export type Size = 'full' | 'smoke';

/** The full run's value, or the smoke run's. */
export const sized = <T>(size: Size, full: T, smoke: T): T => (size === 'smoke' ? smoke : full);

export interface Benchmark {
  readonly name: string;
  /** What it measures, at full size. */
  readonly description: string;
  run(size: Size): Promise<Figure[]>;
}

export function meets(figure: Figure): boolean {
  const match = /^(>=|<=|<|>)\s*(-?[\d.]+)$/.exec(figure.target);
  if (!match) return true;
  const limit = Number(match[2]);
  switch (match[1]) {
    case '>=':
      return figure.value >= limit;
    case '<=':
      return figure.value <= limit;
    case '<':
      return figure.value < limit;
    default:
      return figure.value > limit;
  }
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** CPU seconds of a process (Linux /proc), and of its children that ended (`reaped`). */
export function cpuOf(pid: number): { own: number; reaped: number; parent: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = (i: number) => Number(fields[i]) / 100;
  return { parent: Number(fields[1]), own: ticks(11) + ticks(12), reaped: ticks(13) + ticks(14) };
}
