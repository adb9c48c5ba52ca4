import type { Estimator } from './options.js';

/**
 * Group-relative advantages, as verl computes them (compute_grpo_outcome_advantage and
 * compute_rloo_outcome_advantage in verl/trainer/ppo/core_algos.py):
 * - `grpo`: (r - mean) / (std + epsilon), std with Bessel's correction (torch.std);
 * - `dr_grpo`: r - mean (Dr. GRPO: no division by the std);
 * - `rloo`: r - the mean of the group's other rewards, n/(n-1) * (r - mean);
 * - `none`: no advantage (null), the trainer computes its own from the rewards.
 * A group of one sample has mean 0 and std 1 (its advantage is its reward, up to epsilon); a
 * group whose rewards are all equal gets advantage 0 (exactly: verl's 0 / (0 + epsilon) but for
 * the float mean's rounding). Both are counted.
 */

/** A row to compute an advantage for: its group, its rollout, and the values it is scored by. */
export interface AdvantageInput {
  readonly groupId: string;
  readonly rolloutId: string;
  /** The row's own reward. */
  readonly reward: number;
  /** Its rollout's reward, which rolloutLevel scores by. */
  readonly rolloutReward: number;
}

interface AdvantageSettings {
  readonly estimator: Estimator;
  readonly epsilon: number;
  /** One sample per rollout (its reward, shared by its rows) instead of one per row. */
  readonly rolloutLevel: boolean;
}

export interface Advantages {
  /** Per input row, in order; null with estimator none. */
  readonly values: (number | null)[];
  /** Groups of a single sample, and groups whose samples are all equal. */
  readonly singleSampleGroups: number;
  readonly zeroVarianceGroups: number;
}

/** The advantage of each value of one group. */
export function groupAdvantages(values: readonly number[], estimator: Estimator, epsilon: number): (number | null)[] {
  if (estimator === 'none') return values.map(() => null);
  const n = values.length;
  // Exactly 0, not the rounding error of a float mean over epsilon.
  if (n > 1 && values.every((v) => v === values[0])) return values.map(() => 0);
  const mean = n === 1 ? 0 : values.reduce((a, b) => a + b, 0) / n;
  if (estimator === 'dr_grpo') return values.map((r) => r - mean);
  if (estimator === 'rloo') return values.map((r) => (n === 1 ? r : (n / (n - 1)) * (r - mean)));
  const std = n === 1 ? 1 : Math.sqrt(values.reduce((sum, r) => sum + (r - mean) ** 2, 0) / (n - 1));
  return values.map((r) => (r - mean) / (std + epsilon));
}

/** The advantage of every row, computed per group (of rows, or with rolloutLevel of rollouts). */
export function computeAdvantages(rows: readonly AdvantageInput[], settings: AdvantageSettings): Advantages {
  // Each group's samples (a row, or with rolloutLevel a rollout), and the sample each row reads.
  const samples = new Map<string, number[]>();
  const sampleOfRollout = new Map<string, number>();
  const sampleOfRow: [group: string, index: number][] = [];
  for (const row of rows) {
    const values = samples.get(row.groupId) ?? [];
    samples.set(row.groupId, values);
    let index = settings.rolloutLevel ? sampleOfRollout.get(row.rolloutId) : undefined;
    if (index === undefined) {
      index = values.push(settings.rolloutLevel ? row.rolloutReward : row.reward) - 1;
      if (settings.rolloutLevel) sampleOfRollout.set(row.rolloutId, index);
    }
    sampleOfRow.push([row.groupId, index]);
  }
  const advantages = new Map<string, (number | null)[]>();
  let singleSampleGroups = 0;
  let zeroVarianceGroups = 0;
  for (const [groupId, values] of samples) {
    advantages.set(groupId, groupAdvantages(values, settings.estimator, settings.epsilon));
    if (values.length === 1) singleSampleGroups++;
    else if (values.every((v) => v === values[0])) zeroVarianceGroups++;
  }
  return {
    values: sampleOfRow.map(([group, index]) => advantages.get(group)?.[index] ?? null),
    singleSampleGroups,
    zeroVarianceGroups,
  };
}
