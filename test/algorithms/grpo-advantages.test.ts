import assert from 'node:assert/strict';
import { test } from 'node:test';
import { computeAdvantages, groupAdvantages, type AdvantageInput } from '../../src/algorithms/grpo/advantages.js';

// Advantages for known rewards, worked out by hand from verl's formulas (std with Bessel's
// correction, epsilon 1e-6; a single sample has mean 0 and std 1; equal rewards give 0).

const EPS = 1e-6;
const close = (actual: readonly (number | null)[], expected: readonly number[]) => {
  assert.equal(actual.length, expected.length);
  for (const [i, value] of actual.entries())
    assert.ok(value !== null && Math.abs(value - expected[i]) < 1e-9, `${i}: ${value} != ${expected[i]}`);
};

test('grpo, dr_grpo and rloo on one group of four: mean 0.5, sample std sqrt(1/3)', () => {
  const rewards = [1, 0, 1, 0];
  const std = Math.sqrt(1 / 3);
  close(
    groupAdvantages(rewards, 'grpo', EPS),
    [0.5, -0.5, 0.5, -0.5].map((d) => d / (std + EPS)),
  );
  close(groupAdvantages(rewards, 'dr_grpo', EPS), [0.5, -0.5, 0.5, -0.5]);
  // Leave-one-out: 1 - mean(0, 1, 0) = 2/3; 0 - mean(1, 1, 0) = -2/3.
  close(groupAdvantages(rewards, 'rloo', EPS), [2 / 3, -2 / 3, 2 / 3, -2 / 3]);
  assert.deepEqual(groupAdvantages(rewards, 'none', EPS), [null, null, null, null]);
  // Uneven: 0.2, 0.5, 1.1 (mean 0.6; deviations -0.4, -0.1, 0.5; variance 0.42 / 2).
  const uneven = [0.2, 0.5, 1.1];
  close(
    groupAdvantages(uneven, 'grpo', EPS),
    [-0.4, -0.1, 0.5].map((d) => d / (Math.sqrt(0.21) + EPS)),
  );
  close(groupAdvantages(uneven, 'rloo', EPS), [0.2 - 0.8, 0.5 - 0.65, 1.1 - 0.35]);
});

test('a single sample keeps its reward (mean 0, std 1); equal rewards give exactly 0', () => {
  close(groupAdvantages([0.7], 'grpo', EPS), [0.7 / (1 + EPS)]);
  close(groupAdvantages([0.7], 'dr_grpo', EPS), [0.7]);
  close(groupAdvantages([0.7], 'rloo', EPS), [0.7]);
  for (const estimator of ['grpo', 'dr_grpo', 'rloo'] as const)
    assert.deepEqual(groupAdvantages([0.1, 0.1, 0.1], estimator, EPS), [0, 0, 0]);
});

// Two groups: g1 has rollouts a (two rows) and b (one row); g2 has rollout c alone.
const ROWS: AdvantageInput[] = [
  { groupId: 'g1', rolloutId: 'a', reward: 0.2, rolloutReward: 1 },
  { groupId: 'g1', rolloutId: 'a', reward: 0.4, rolloutReward: 1 },
  { groupId: 'g1', rolloutId: 'b', reward: 0, rolloutReward: 0 },
  { groupId: 'g2', rolloutId: 'c', reward: 0.5, rolloutReward: 0.5 },
];

test('per row: each row is a sample of its group', () => {
  const result = computeAdvantages(ROWS, { estimator: 'grpo', epsilon: EPS, rolloutLevel: false });
  // g1's rows 0.2, 0.4, 0: mean 0.2, sample std 0.2.
  close(result.values, [0, 0.2 / (0.2 + EPS), -0.2 / (0.2 + EPS), 0.5 / (1 + EPS)]);
  assert.deepEqual([result.singleSampleGroups, result.zeroVarianceGroups], [1, 0]);
});

test('rolloutLevel: one sample per rollout (its final reward), shared by its rows', () => {
  const result = computeAdvantages(ROWS, { estimator: 'grpo', epsilon: EPS, rolloutLevel: true });
  // g1's rollouts 1 and 0: mean 0.5, sample std sqrt(0.5).
  const a = 0.5 / (Math.sqrt(0.5) + EPS);
  close(result.values, [a, a, -a, 0.5 / (1 + EPS)]);
  const rloo = computeAdvantages(ROWS, { estimator: 'rloo', epsilon: EPS, rolloutLevel: true });
  close(rloo.values, [1, 1, -1, 0.5]);
  const dr = computeAdvantages(ROWS, { estimator: 'dr_grpo', epsilon: EPS, rolloutLevel: true });
  close(dr.values, [0.5, 0.5, -0.5, 0.5]);
  const none = computeAdvantages(ROWS, { estimator: 'none', epsilon: EPS, rolloutLevel: true });
  assert.deepEqual(none.values, [null, null, null, null]);
});

test('zero-variance groups are counted in the units the estimator scores', () => {
  const rows: AdvantageInput[] = [
    { groupId: 'g', rolloutId: 'a', reward: 0.3, rolloutReward: 1 },
    { groupId: 'g', rolloutId: 'b', reward: 0.7, rolloutReward: 1 },
  ];
  const perRollout = computeAdvantages(rows, { estimator: 'grpo', epsilon: EPS, rolloutLevel: true });
  assert.deepEqual(perRollout.values, [0, 0]);
  assert.deepEqual([perRollout.singleSampleGroups, perRollout.zeroVarianceGroups], [0, 1]);
  const perRow = computeAdvantages(rows, { estimator: 'grpo', epsilon: EPS, rolloutLevel: false });
  assert.deepEqual(perRow.zeroVarianceGroups, 0);
});
