/**
 * The statistics of `agl eval` and of the optimizers' reports (docs/evaluation.md has the methods
 * and their assumptions). The unit is the task: a task's samples (several rollouts of it) are
 * nested within it, so intervals resample tasks, each with all its samples (a cluster bootstrap);
 * resampling the samples as well would count their noise twice. Every random choice comes from a
 * seed: the same scores and seed give the same interval.
 */
import { Random } from '../shared/random.js';

/** One task's scores: one per sample that gave a score, or a single number. */
export type TaskScores = number | readonly number[];

export interface Interval {
  readonly low: number;
  readonly high: number;
}

export interface MeanEstimate extends Interval {
  /** The mean of the tasks' means: each task weighs the same, however many samples scored. */
  readonly mean: number;
  /** Tasks with at least one score. */
  readonly tasks: number;
}

export interface PairedDifference extends Interval {
  /** The mean over tasks of (a's task mean - b's task mean). */
  readonly mean: number;
  /** Tasks that both sides scored; the others are left out. */
  readonly tasks: number;
  /** Two-sided p-value of the paired sign-flip test of "no difference". */
  readonly pValue: number;
  /** Whether the 95% interval holds 0: no detectable difference at this sample size. */
  readonly includesZero: boolean;
  /**
   * A difference both methods see: the interval excludes 0 and p < 0.05. The bootstrap is liberal
   * when few tasks changed (4 of 12 all +1: interval [0.04, 0.63], exact p 0.125).
   */
  readonly detected: boolean;
  /**
   * Tasks a paired comparison needs to detect a difference of this size (two-sided 5% level, 80%
   * power) given the spread seen here; null when the difference is 0 or nothing varies.
   */
  readonly tasksNeeded: number | null;
}

export interface StatisticsOptions {
  /** Seed of the resampling (default 0). */
  readonly seed?: number;
  /** Bootstrap resamples (default 2,000). */
  readonly resamples?: number;
}

const DEFAULT_RESAMPLES = 2000;
/** Sign-flip tests enumerate every flip up to this many tasks (2^16 flips), and sample flips beyond. */
const EXACT_FLIP_TASKS = 16;
const SAMPLED_FLIPS = 10000;
const Z_975 = 1.959963984540054;
const Z_80 = 0.8416212335729143;

/** A task's mean score, or null when none of its samples scored. */
function taskMean(scores: TaskScores): number | null {
  const values = typeof scores === 'number' ? [scores] : scores;
  let sum = 0;
  for (const value of values) {
    if (!Number.isFinite(value)) throw new TypeError(`scores must be finite numbers, not ${value}`);
    sum += value;
  }
  return values.length ? sum / values.length : null;
}

const mean = (values: readonly number[]) => values.reduce((a, b) => a + b, 0) / values.length;

/** The q-quantile of sorted values, interpolated between neighbours. */
function quantile(sorted: Float64Array, q: number): number {
  const at = q * (sorted.length - 1);
  const below = Math.floor(at);
  const above = Math.min(sorted.length - 1, below + 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (at - below);
}

/** Student's t quantile at 0.975 by its Cornish-Fisher expansion (within 0.001 from 3 degrees of freedom on). */
function t975(df: number): number {
  const z = Z_975;
  return (
    z +
    (z ** 3 + z) / (4 * df) +
    (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2) +
    (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3)
  );
}

/**
 * The 95% interval of the mean of `values` (one per task) by bootstrap over them, as the
 * expanded percentile interval (Hesterberg 2015): the resampled means' spread widened by
 * sqrt(n / (n - 1)) * t(n - 1) / z, within the values' range. A plain percentile interval has
 * the plug-in variance, short by n / (n - 1), and normal tails where the mean's are Student's: it
 * covers 90% at 10 tasks.
 */
function bootstrapInterval(values: readonly number[], options: StatisticsOptions): Interval {
  const n = values.length;
  const center = mean(values);
  if (n < 2) return { low: center, high: center };
  const random = new Random(options.seed ?? 0);
  const resamples = options.resamples ?? DEFAULT_RESAMPLES;
  const means = new Float64Array(resamples);
  for (let r = 0; r < resamples; r++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += values[random.below(n)];
    means[r] = sum / n;
  }
  means.sort();
  const widen = (Math.sqrt(n / (n - 1)) * t975(n - 1)) / Z_975;
  // On few tasks the widening reaches past every value seen (4 tasks of rewards in [0, 1] gave
  // [-0.18, 1.22]): the interval stops at the smallest and largest value, where the plain
  // percentile interval stops too.
  let lowest = values[0];
  let highest = values[0];
  for (const value of values) {
    lowest = Math.min(lowest, value);
    highest = Math.max(highest, value);
  }
  return {
    low: Math.max(lowest, center + (quantile(means, 0.025) - center) * widen),
    high: Math.min(highest, center + (quantile(means, 0.975) - center) * widen),
  };
}

/** The mean score over tasks with its 95% interval, by bootstrap over tasks (samples nested within). */
export function bootstrapMean(tasks: readonly TaskScores[], options: StatisticsOptions = {}): MeanEstimate | null {
  const means = tasks.map(taskMean).filter((m): m is number => m !== null);
  if (means.length === 0) return null;
  return { mean: mean(means), ...bootstrapInterval(means, options), tasks: means.length };
}

/** The Wilson score interval (95%) of a success rate: sound also near 0 and 1, where the normal one is not. */
export function wilsonInterval(successes: number, trials: number): Interval & { rate: number } {
  if (!Number.isInteger(successes) || !Number.isInteger(trials) || successes < 0 || successes > trials)
    throw new TypeError(`wilsonInterval needs 0 <= successes <= trials, whole numbers (given ${successes}/${trials})`);
  if (trials === 0) return { rate: 0, low: 0, high: 1 };
  const p = successes / trials;
  const z2 = Z_975 * Z_975;
  const center = (p + z2 / (2 * trials)) / (1 + z2 / trials);
  const half = (Z_975 / (1 + z2 / trials)) * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials));
  return { rate: p, low: Math.max(0, center - half), high: Math.min(1, center + half) };
}

/**
 * Two-sided p-value of the paired sign-flip (randomization) test: under "a and b do not differ",
 * each task's difference is as likely to have either sign. Exact up to 16 tasks, else from
 * 10,000 random flips (with the observed one counted, so p is never 0).
 */
function signFlipPValue(differences: readonly number[], seed: number): number {
  const n = differences.length;
  const observed = Math.abs(differences.reduce((a, b) => a + b, 0));
  // Sums that equal the observed one up to rounding count as at least as extreme.
  const tolerance = 1e-9 * Math.max(1, observed);
  if (n <= EXACT_FLIP_TASKS) {
    let extreme = 0;
    for (let mask = 0; mask < 2 ** n; mask++) {
      let sum = 0;
      for (let i = 0; i < n; i++) sum += mask & (1 << i) ? -differences[i] : differences[i];
      if (Math.abs(sum) >= observed - tolerance) extreme++;
    }
    return extreme / 2 ** n;
  }
  const random = new Random(seed);
  let extreme = 1;
  for (let r = 0; r < SAMPLED_FLIPS; r++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += random.next() < 0.5 ? -differences[i] : differences[i];
    if (Math.abs(sum) >= observed - tolerance) extreme++;
  }
  return extreme / (SAMPLED_FLIPS + 1);
}

/** Tasks needed to detect `meanDifference` with differences of standard deviation `sd` (normal approximation). */
function tasksNeeded(meanDifference: number, sd: number): number | null {
  if (meanDifference === 0 || sd === 0) return null;
  return Math.max(2, Math.ceil(((Z_975 + Z_80) * sd) ** 2 / meanDifference ** 2));
}

/**
 * a against b on the same tasks (a[i] and b[i] are task i's scores): the mean difference a - b
 * with its 95% interval (bootstrap over tasks), the sign-flip test's p-value, and the tasks a
 * paired comparison needs to detect a difference this large. Tasks that either side did not
 * score are left out; null when no task is left.
 */
export function pairedDifference(
  a: readonly TaskScores[],
  b: readonly TaskScores[],
  options: StatisticsOptions = {},
): PairedDifference | null {
  if (a.length !== b.length)
    throw new TypeError(`pairedDifference needs the same tasks on both sides (given ${a.length} and ${b.length})`);
  const differences: number[] = [];
  for (let i = 0; i < a.length; i++) {
    const [left, right] = [taskMean(a[i]), taskMean(b[i])];
    if (left !== null && right !== null) differences.push(left - right);
  }
  if (differences.length === 0) return null;
  const center = mean(differences);
  const interval = bootstrapInterval(differences, options);
  const sd =
    differences.length < 2
      ? 0
      : Math.sqrt(differences.reduce((s, d) => s + (d - center) ** 2, 0) / (differences.length - 1));
  const includesZero = interval.low <= 0 && interval.high >= 0;
  const pValue = signFlipPValue(differences, options.seed ?? 0);
  return {
    mean: center,
    ...interval,
    tasks: differences.length,
    pValue,
    includesZero,
    detected: !includesZero && pValue < 0.05,
    tasksNeeded: tasksNeeded(center, sd),
  };
}
