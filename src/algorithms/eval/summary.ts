import type { RolloutStatus } from '../../api/types.js';
import type { RunCost } from '../shared/cost-clock.js';
import type { EvalSettings } from './options.js';
import {
  bootstrapMean,
  type Interval,
  type MeanEstimate,
  type PairedDifference,
  pairedDifference,
  wilsonInterval,
} from './statistics.js';
import { streamSeed } from '../shared/random.js';

/** One rollout of an evaluation: which variant, task and sample it ran, and what it gave. */
export interface RolloutScore {
  readonly variant: number;
  readonly task: number;
  readonly sample: number;
  readonly rolloutId: string;
  readonly status: RolloutStatus;
  /** Null when the rollout failed or recorded no reward: a failure, not a 0. */
  readonly reward: number | null;
  readonly tokens: number;
  readonly seconds: number | null;
}

export interface TaskSummary {
  readonly task: number;
  readonly rollouts: number;
  readonly scored: number;
  readonly failed: number;
  /** The mean of the scored samples; null when none scored. */
  readonly mean: number | null;
  readonly tokens: number;
  readonly seconds: number;
  readonly rolloutIds: readonly string[];
}

export interface VariantSummary {
  readonly name: string;
  readonly resourcesId: string;
  readonly rollouts: number;
  readonly scored: number;
  /** Rollouts that did not succeed or gave no reward, by status (`no_reward` for a succeeded one without). */
  readonly failures: Readonly<Record<string, number>>;
  readonly failed: number;
  /** The mean reward over tasks with its 95% interval; null when no rollout scored. */
  readonly mean: MeanEstimate | null;
  /** The share of scored rollouts with reward 1 and its Wilson interval, where every reward is 0 or 1. */
  readonly success: (Interval & { rate: number }) | null;
  readonly tokensPerTask: number;
  readonly secondsPerRollout: number | null;
  readonly tasks: readonly TaskSummary[];
}

export interface TaskChange {
  readonly task: number;
  readonly input: unknown;
  readonly a: number;
  readonly b: number;
  readonly change: number;
}

/** b against a on the same tasks: b - a. */
export interface PairSummary {
  readonly a: string;
  readonly b: string;
  readonly difference: PairedDifference | null;
  /** The tasks whose score changed most, largest change first (at most 5). */
  readonly changed: readonly TaskChange[];
}

export interface EvalResult {
  readonly runId: string;
  readonly tasks: number;
  readonly samples: number;
  readonly seed: number;
  readonly variants: readonly VariantSummary[];
  /** Every pair of variants, the earlier one as `a`. */
  readonly pairs: readonly PairSummary[];
  /** The task inputs, by task index. */
  readonly inputs: readonly unknown[];
  /** What the evaluation spent, as SQL counts it over its rollouts. */
  readonly cost: RunCost;
}

const MOST_CHANGED = 5;

/** What an evaluation's rollouts say, variant by variant and pair by pair. */
export function summarize(
  runId: string,
  settings: EvalSettings,
  inputs: readonly unknown[],
  resourcesIds: readonly string[],
  scores: readonly RolloutScore[],
): Omit<EvalResult, 'cost'> {
  const variants = settings.variants.map((variant, v) =>
    summarizeVariant(
      variant.name,
      resourcesIds[v],
      inputs.length,
      scores.filter((s) => s.variant === v),
      settings.seed,
    ),
  );
  const pairs: PairSummary[] = [];
  for (let i = 0; i < variants.length; i++)
    for (let j = i + 1; j < variants.length; j++)
      pairs.push(comparePair(variants[i], variants[j], inputs, settings.seed));
  return { runId, tasks: inputs.length, samples: settings.samples, seed: settings.seed, variants, pairs, inputs };
}

function summarizeVariant(
  name: string,
  resourcesId: string,
  taskCount: number,
  scores: readonly RolloutScore[],
  seed: number,
): VariantSummary {
  const tasks = Array.from({ length: taskCount }, (_, task) =>
    summarizeTask(
      task,
      scores.filter((s) => s.task === task),
    ),
  );
  const rewards = scores.map((s) => s.reward).filter((r): r is number => r !== null);
  const failures: Record<string, number> = {};
  for (const s of scores)
    if (s.reward === null) {
      const why = s.status === 'succeeded' ? 'no_reward' : s.status;
      failures[why] = (failures[why] ?? 0) + 1;
    }
  const binary = rewards.length > 0 && rewards.every((r) => r === 0 || r === 1);
  const seconds = scores.map((s) => s.seconds).filter((s): s is number => s !== null);
  return {
    name,
    resourcesId,
    rollouts: scores.length,
    scored: rewards.length,
    failures,
    failed: scores.length - rewards.length,
    mean: bootstrapMean(
      tasks.map((t) => scores.filter((s) => s.task === t.task && s.reward !== null).map((s) => s.reward as number)),
      { seed: streamSeed(seed, 'mean', name) },
    ),
    success: binary ? wilsonInterval(rewards.filter((r) => r === 1).length, rewards.length) : null,
    tokensPerTask: tasks.reduce((sum, t) => sum + t.tokens, 0) / Math.max(1, taskCount),
    secondsPerRollout: seconds.length ? seconds.reduce((a, b) => a + b, 0) / seconds.length : null,
    tasks,
  };
}

function summarizeTask(task: number, scores: readonly RolloutScore[]): TaskSummary {
  const rewards = scores.map((s) => s.reward).filter((r): r is number => r !== null);
  return {
    task,
    rollouts: scores.length,
    scored: rewards.length,
    failed: scores.length - rewards.length,
    mean: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null,
    tokens: scores.reduce((sum, s) => sum + s.tokens, 0),
    seconds: scores.reduce((sum, s) => sum + (s.seconds ?? 0), 0),
    rolloutIds: scores.map((s) => s.rolloutId),
  };
}

function comparePair(a: VariantSummary, b: VariantSummary, inputs: readonly unknown[], seed: number): PairSummary {
  const scoresOf = (v: VariantSummary) => v.tasks.map((t) => (t.mean === null ? [] : [t.mean]));
  const changed = a.tasks
    .map((t, i) => ({ task: i, input: inputs[i], a: t.mean, b: b.tasks[i].mean }))
    .filter((t): t is TaskChange & { a: number; b: number } => t.a !== null && t.b !== null)
    .map((t) => ({ ...t, change: t.b - t.a }))
    .filter((t) => t.change !== 0)
    .sort((x, y) => Math.abs(y.change) - Math.abs(x.change) || x.task - y.task)
    .slice(0, MOST_CHANGED);
  return {
    a: a.name,
    b: b.name,
    difference: pairedDifference(scoresOf(b), scoresOf(a), { seed: streamSeed(seed, 'pair', a.name, b.name) }),
    changed,
  };
}
