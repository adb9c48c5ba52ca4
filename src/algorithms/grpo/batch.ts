import type { QuerySource } from '../../adapters/source.js';
import { isOverlong, truncateRow, typedTrajectories, type TypedTrajectoryRow } from '../../adapters/trajectories.js';
import { GRPO_DROP_REASONS } from '../../api/semconv.js';
import type { RolloutStatus } from '../../api/types.js';
import type { GrpoOptions } from './options.js';

/**
 * The rows of a step's rollouts (TraceToTrajectory over their latest attempts alone), after the
 * data-quality checks: a rollout that failed, ran on a model too old, has a call without token
 * ids, gave no reward, has no call of a trained agent, or (overlong: drop) a row over a length
 * limit, is left out whole and counted by reason, never passed on as empty or partial rows.
 */

export const DROP_REASONS = GRPO_DROP_REASONS;
type DropReason = (typeof DROP_REASONS)[number];
export type DropCounts = Record<DropReason, number>;

/** A finished rollout of a step. */
export interface StepRollout {
  readonly rolloutId: string;
  /** Its latest attempt: the one its status is from. */
  readonly attemptId: string | null;
  readonly status: RolloutStatus;
  readonly groupId: string;
  readonly modelVersion: string;
  /** Where its model version stands in the run's (0: the starting model). */
  readonly versionIndex: number;
}

/** A row of a batch (the columns of docs/training.md), before its advantage; its lists typed as Arrow's columns. */
export interface BatchRow {
  readonly groupId: string;
  readonly rolloutId: string;
  readonly attemptId: string;
  readonly modelVersion: string;
  readonly promptIds: Int32Array;
  readonly responseIds: Int32Array;
  readonly responseMask: Int8Array;
  readonly responseLogprobs: Float32Array;
  readonly reward: number;
  /** Its rollout's final reward (or the fill), which rolloutLevel advantages score by. */
  readonly rolloutReward: number;
}

/** What the checks kept and why they left the rest out. */
export interface BuiltRows {
  readonly rows: BatchRow[];
  /** The rollouts whose rows are in `rows`. */
  readonly kept: StepRollout[];
  readonly dropped: DropCounts;
  /** Rows cut to the length limits (overlong: truncate). */
  readonly truncated: number;
  /** Rollouts without a reward that got `missingReward`. */
  readonly filledRewards: number;
}

export type BuildSettings = Pick<
  GrpoOptions,
  | 'aggregation'
  | 'credit'
  | 'gamma'
  | 'agentMatch'
  | 'maxPromptLength'
  | 'maxResponseLength'
  | 'overlong'
  | 'missingReward'
> & {
  /** Rollouts of a model version before this index are stale. */
  readonly oldestVersionIndex: number;
};

export const noDrops = (): DropCounts => Object.fromEntries(DROP_REASONS.map((reason) => [reason, 0])) as DropCounts;

/** The rows of `rollouts` that pass the checks. */
export async function buildRows(
  source: QuerySource,
  rollouts: readonly StepRollout[],
  settings: BuildSettings,
): Promise<BuiltRows> {
  const dropped = noDrops();
  const candidates = rollouts.filter((r) => {
    const reason: DropReason | null =
      r.status !== 'succeeded' || r.attemptId === null
        ? 'failed'
        : r.versionIndex < settings.oldestVersionIndex
          ? 'stale'
          : null;
    if (reason) dropped[reason]++;
    return reason === null;
  });
  const attempts = candidates.map((r) => ({ rolloutId: r.rolloutId, attemptId: r.attemptId ?? '' }));
  const { rows, stats, finals } = await typedTrajectories(source, {
    mode: settings.aggregation,
    credit: settings.credit,
    gamma: settings.gamma,
    agentMatch: settings.agentMatch,
    otherAgents: 'mask',
    attempts,
  });
  const rowsOf = groupByRollout(rows);
  const missingIds = new Set(stats.missingTokenIdRollouts);
  const built = { rows: [] as BatchRow[], kept: [] as StepRollout[], dropped, truncated: 0, filledRewards: 0 };
  for (const rollout of candidates) {
    const own = rowsOf.get(rollout.rolloutId) ?? [];
    const final = finals.get(rollout.attemptId ?? '') ?? settings.missingReward ?? null;
    const reason = dropReason(rollout, own, final, missingIds, settings);
    if (reason) {
      dropped[reason]++;
      continue;
    }
    if (!finals.has(rollout.attemptId ?? '')) built.filledRewards++;
    built.kept.push(rollout);
    for (const row of own) {
      if (isOverlong(row, settings)) {
        truncateRow(row, settings);
        built.truncated++;
      }
      built.rows.push(batchRow(rollout, row, final ?? 0, settings));
    }
  }
  return built;
}

/** Why a rollout that ran on the current model is left out, or null. */
function dropReason(
  rollout: StepRollout,
  rows: readonly TypedTrajectoryRow[],
  final: number | null,
  missingIds: ReadonlySet<string>,
  settings: BuildSettings,
): DropReason | null {
  if (missingIds.has(rollout.rolloutId)) return 'no_token_ids';
  if (final === null) return 'no_reward';
  if (rows.length === 0) return 'no_calls';
  if (settings.overlong === 'drop' && rows.some((row) => isOverlong(row, settings))) return 'overlong';
  return null;
}

/**
 * A trajectory row as a batch row. A row without a reward of its own (step or discounted credit
 * with no reward after its calls) scores 0; with final credit it has its rollout's.
 */
function batchRow(
  rollout: StepRollout,
  row: TypedTrajectoryRow,
  rolloutReward: number,
  settings: BuildSettings,
): BatchRow {
  return {
    groupId: rollout.groupId,
    rolloutId: rollout.rolloutId,
    attemptId: row.attempt_id ?? '',
    modelVersion: rollout.modelVersion,
    promptIds: row.prompt_ids,
    responseIds: row.response_ids,
    responseMask: row.response_mask,
    responseLogprobs: row.response_logprobs,
    reward: row.reward ?? (settings.credit === 'final' ? rolloutReward : 0),
    rolloutReward,
  };
}

function groupByRollout(rows: readonly TypedTrajectoryRow[]): Map<string, TypedTrajectoryRow[]> {
  const byRollout = new Map<string, TypedTrajectoryRow[]>();
  for (const row of rows) {
    const id = row.rollout_id ?? '';
    const list = byRollout.get(id);
    if (list) list.push(row);
    else byRollout.set(id, [row]);
  }
  return byRollout;
}

/** Two waves of a step's rows as one. */
export function mergeBuilt(a: BuiltRows, b: BuiltRows): BuiltRows {
  const dropped = noDrops();
  for (const reason of DROP_REASONS) dropped[reason] = a.dropped[reason] + b.dropped[reason];
  return {
    rows: [...a.rows, ...b.rows],
    kept: [...a.kept, ...b.kept],
    dropped,
    truncated: a.truncated + b.truncated,
    filledRewards: a.filledRewards + b.filledRewards,
  };
}

/** The groups that have at least one kept rollout. */
export const usableGroups = (built: BuiltRows): Set<string> => new Set(built.kept.map((r) => r.groupId));
