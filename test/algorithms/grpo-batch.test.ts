import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { buildRows, type BuildSettings, type StepRollout } from '../../src/algorithms/grpo/batch.js';
import { tableFromIPC } from 'apache-arrow';
import type { QuerySource } from '../../src/adapters/source.js';
import { traceToTrajectories } from '../../src/adapters/trajectories.js';
import { arrowStream } from '../../src/algorithms/grpo/arrow.js';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward, span } from '../support/span-fixtures.js';

// GRPO's batch rows from span fixtures in a real DuckDB file: which agents' calls reach the
// batch, trajectory merging and masks against hand-written token sequences, and each reason a
// rollout is left out (failed, stale, no token ids, no reward, no call, overlong).

let dir: string;
let store: DuckDBStore;
const source: QuerySource = { stream: (sql, options) => store.streamQuery(sql, { ...options, guard: false }) };

/** Rollout `id`'s attempt `at-<id>`, in trace `trace`. */
const at = (id: string, trace: number) => ({ rollout_id: `ro-${id}`, attempt_id: `at-${id}`, trace });

/** A two-agent rollout: the planner's call, then the solver's, which continues it; reward 1 at the end. */
function twoAgents(id: string, trace: number) {
  const ids = at(id, trace);
  const planner = span({ ...ids, name: 'plan', start: 1, end: 12, attributes: { 'agent.name': 'planner' } });
  const solver = span({ ...ids, name: 'solve', start: 13, end: 30, attributes: { 'agent.name': 'solver' } });
  return [
    planner,
    call(`plan-${id}`, 'a plan', 10, { ...ids, parent_id: planner.span_id, promptIds: [1, 2], responseIds: [3, 4] }),
    solver,
    // Its prompt is the planner's prompt and answer, then a tool result [9].
    call(`solve-${id}`, 'solved', 20, {
      ...ids,
      parent_id: solver.span_id,
      promptIds: [1, 2, 3, 4, 9],
      responseIds: [5, 6],
      logprobs: [-0.5, -0.25],
    }),
    reward(1, 25, ids),
  ];
}

before(async () => {
  dir = await newTempDir();
  store = await DuckDBStore.open({ path: join(dir, 'grpo-batch.duckdb') });
  await store.writeSpans(
    spanRows(
      ...twoAgents('a', 1),
      ...twoAgents('stale', 2),
      ...twoAgents('failed', 3),
      // A call without token ids.
      call('no-ids', 'x', 10, { ...at('ids', 4), promptIds: [], responseIds: [] }),
      reward(1, 15, at('ids', 4)),
      // A call and no reward.
      call('no-reward', 'x', 10, { ...at('noreward', 5), promptIds: [7], responseIds: [8] }),
      // Only the planner: nothing of the solver to train.
      span({ ...at('planner', 6), name: 'plan', start: 1, end: 12, attributes: { 'agent.name': 'planner' } }),
      reward(0, 15, at('planner', 6)),
      // A prompt of 6 tokens.
      call('long', 'x', 10, { ...at('long', 7), promptIds: [1, 2, 3, 4, 5, 6], responseIds: [8] }),
      reward(0.5, 15, at('long', 7)),
    ),
    0,
  );
  // The planner-only rollout's call, under its planner span.
  const [planner] = (
    await store.query(`SELECT span_id FROM spans WHERE rollout_id = 'ro-planner' AND name = 'plan'`, { guard: false })
  ).rows;
  await store.writeSpans(
    spanRows(call('plan-only', 'p', 10, { ...at('planner', 6), parent_id: String(planner.span_id), promptIds: [1] })),
    0,
  );
});
after(async () => {
  await store.close();
  await removeDir(dir);
});

const rollout = (id: string, fields: Partial<StepRollout> = {}): StepRollout => ({
  rolloutId: `ro-${id}`,
  attemptId: `at-${id}`,
  status: 'succeeded',
  groupId: 'g1',
  modelVersion: '1',
  versionIndex: 1,
  ...fields,
});

const SETTINGS: BuildSettings = {
  aggregation: 'transition',
  credit: 'final',
  gamma: 1,
  overlong: 'drop',
  oldestVersionIndex: 1,
};

const tokens = (rows: Awaited<ReturnType<typeof buildRows>>['rows']) =>
  rows.map((r) => ({
    prompt: Array.from(r.promptIds),
    response: Array.from(r.responseIds),
    mask: Array.from(r.responseMask),
    logprobs: Array.from(r.responseLogprobs),
  }));

test('transition with agentMatch: only the matched agent calls reach the batch', async () => {
  const built = await buildRows(source, [rollout('a')], { ...SETTINGS, agentMatch: '^solver$' });
  assert.deepEqual(tokens(built.rows), [
    { prompt: [1, 2, 3, 4, 9], response: [5, 6], mask: [1, 1], logprobs: [-0.5, -0.25] },
  ]);
  assert.deepEqual(
    built.rows.map((r) => [r.groupId, r.rolloutId, r.attemptId, r.modelVersion, r.reward, r.rolloutReward]),
    [['g1', 'ro-a', 'at-a', '1', 1, 1]],
  );
  const both = await buildRows(source, [rollout('a')], SETTINGS);
  assert.deepEqual(
    tokens(both.rows).map((r) => r.response),
    [
      [3, 4],
      [5, 6],
    ],
  );
});

test("trajectory: continuing calls merge; another agent's call stays as masked context", async () => {
  const all = await buildRows(source, [rollout('a')], { ...SETTINGS, aggregation: 'trajectory' });
  assert.deepEqual(tokens(all.rows), [
    { prompt: [1, 2], response: [3, 4, 9, 5, 6], mask: [1, 1, 0, 1, 1], logprobs: [0, 0, 0, -0.5, -0.25] },
  ]);
  const solver = await buildRows(source, [rollout('a')], {
    ...SETTINGS,
    aggregation: 'trajectory',
    agentMatch: 'solver',
  });
  assert.deepEqual(tokens(solver.rows), [
    { prompt: [1, 2], response: [3, 4, 9, 5, 6], mask: [0, 0, 0, 1, 1], logprobs: [0, 0, 0, -0.5, -0.25] },
  ]);
  // The planner alone: nothing to train, the rollout is left out as having no call.
  const planner = await buildRows(source, [rollout('planner')], {
    ...SETTINGS,
    aggregation: 'trajectory',
    agentMatch: 'solver',
  });
  assert.deepEqual([planner.rows.length, planner.dropped.no_calls], [0, 1]);
});

test('data quality: each rollout left out whole, counted by reason; nothing empty passes', async () => {
  const rollouts = [
    rollout('a'),
    rollout('stale', { versionIndex: 0, modelVersion: '0' }),
    rollout('failed', { status: 'failed' }),
    rollout('ids'),
    rollout('noreward'),
    rollout('long'),
  ];
  const built = await buildRows(source, rollouts, { ...SETTINGS, maxPromptLength: 5 });
  assert.deepEqual(
    built.kept.map((r) => r.rolloutId),
    ['ro-a'],
  );
  assert.deepEqual(built.dropped, {
    failed: 1,
    stale: 1,
    no_token_ids: 1,
    no_reward: 1,
    no_calls: 0,
    overlong: 1,
  });
  assert.ok(built.rows.every((r) => r.responseIds.length > 0 && r.promptIds.length > 0));
  // No call of a trained agent: the planner-only rollout, when only the solver is trained.
  const planner = await buildRows(source, [rollout('planner')], { ...SETTINGS, agentMatch: 'solver' });
  assert.deepEqual([planner.kept.length, planner.dropped.no_calls], [0, 1]);
});

test('configured instead: a missing reward filled, an overlong row truncated (prompt keeps its end)', async () => {
  const built = await buildRows(source, [rollout('noreward'), rollout('long')], {
    ...SETTINGS,
    missingReward: 0.25,
    maxPromptLength: 4,
    overlong: 'truncate',
  });
  assert.deepEqual(
    built.rows.map((r) => [r.rolloutId, Array.from(r.promptIds), r.reward, r.rolloutReward]),
    [
      ['ro-noreward', [7], 0.25, 0.25],
      ['ro-long', [3, 4, 5, 6], 0.5, 0.5],
    ],
  );
  assert.deepEqual([built.filledRewards, built.truncated], [1, 1]);
});

test('staleness: rollouts of a model version before the oldest allowed are left out', async () => {
  const rollouts = [rollout('a', { versionIndex: 2, modelVersion: 'v2' }), rollout('stale', { versionIndex: 1 })];
  const strict = await buildRows(source, rollouts, { ...SETTINGS, oldestVersionIndex: 2 });
  assert.deepEqual([strict.kept.map((r) => r.rolloutId), strict.dropped.stale], [['ro-a'], 1]);
  assert.ok(strict.rows.every((r) => r.modelVersion === 'v2'));
  const lagging = await buildRows(source, rollouts, { ...SETTINGS, oldestVersionIndex: 1 });
  assert.deepEqual(
    lagging.kept.map((r) => r.rolloutId),
    ['ro-a', 'ro-stale'],
  );
});

test("the batch's typed rows and Arrow stream hold what the adapter's array rows hold", async () => {
  // The adapter reads the same calls as JS arrays, through a source that gives no typed lists.
  const arrays: QuerySource = { stream: (sql) => store.streamQuery(sql, { guard: false }) };
  const rollouts = ['a', 'long', 'noreward', 'planner', 'ids'].map((id) => rollout(id));
  const attempts = rollouts.map((r) => ({ rolloutId: r.rolloutId, attemptId: r.attemptId ?? '' }));
  const cases = [
    { aggregation: 'transition', agentMatch: undefined, maxPromptLength: undefined, maxResponseLength: undefined },
    { aggregation: 'trajectory', agentMatch: 'solver', maxPromptLength: 1, maxResponseLength: 4 },
    { aggregation: 'trajectory', agentMatch: undefined, maxPromptLength: 3, maxResponseLength: undefined },
  ] as const;
  for (const limits of cases) {
    const built = await buildRows(source, rollouts, { ...SETTINGS, ...limits, overlong: 'truncate', missingReward: 0 });
    const { rows } = await traceToTrajectories(arrays, {
      mode: limits.aggregation,
      credit: 'final',
      agentMatch: limits.agentMatch,
      otherAgents: 'mask',
      attempts,
      maxPromptLength: limits.maxPromptLength,
      maxResponseLength: limits.maxResponseLength,
    });
    const expected = rows.map((r) => ({
      prompt: r.prompt_ids,
      response: r.response_ids,
      mask: r.response_mask,
      logprobs: r.response_logprobs.map(Math.fround),
    }));
    assert.ok(expected.some((r) => r.mask.includes(0)) || limits.aggregation === 'transition');
    assert.deepEqual(tokens(built.rows), expected);
    const table = tableFromIPC(
      arrowStream({
        batchId: 'b',
        step: 1,
        modelVersion: '1',
        estimator: 'grpo',
        aggregation: limits.aggregation,
        settings: { steps: 1, batchSize: 1, groupSize: 1 },
        rows: built.rows,
        advantages: built.rows.map(() => 0),
      }),
    );
    const list = (name: string) =>
      table
        .getChild(name)
        ?.toArray()
        .map((v: Iterable<number>) => Array.from(v));
    assert.deepEqual(
      { prompt: list('prompt_ids'), response: list('response_ids'), mask: list('response_mask') },
      {
        prompt: expected.map((r) => r.prompt),
        response: expected.map((r) => r.response),
        mask: expected.map((r) => r.mask),
      },
    );
    assert.deepEqual(
      list('response_logprobs'),
      expected.map((r) => r.logprobs),
    );
  }
});

test("spans not derived yet: a batch reads its rollouts' calls, rewards and agents in one statement", async () => {
  // Other rollouts' spans wait for the deriver too (the next step's, under way): the batch parses
  // its own, and the rewards it reads for its calls' credit give its final rewards as well.
  const waiting = await DuckDBStore.open({ path: join(dir, 'waiting.duckdb'), deriveWhenIdleMs: Infinity });
  try {
    const others = Array.from({ length: 40 }, (_, i) => twoAgents(`other-${i}`, 100 + i)).flat();
    await waiting.writeSpans(spanRows(...twoAgents('a', 1), ...twoAgents('b', 2), ...others), 0);
    const statements: string[] = [];
    const counted: QuerySource = {
      stream: (sql, options) => {
        statements.push(sql);
        return waiting.streamQuery(sql, { ...options, guard: false });
      },
    };
    const batch = [rollout('a'), rollout('b', { groupId: 'g2' })];
    const settings: BuildSettings = { ...SETTINGS, aggregation: 'trajectory', agentMatch: '^solver$' };
    const fresh = await buildRows(counted, batch, settings);
    assert.equal(statements.length, 1);
    assert.equal(await waiting.deriveAll(), 5 * 42);
    const derived = await buildRows(counted, batch, settings);
    assert.deepEqual(tokens(fresh.rows), tokens(derived.rows));
    assert.deepEqual(
      fresh.rows.map((r) => [r.rolloutId, r.reward, r.rolloutReward]),
      [
        ['ro-a', 1, 1],
        ['ro-b', 1, 1],
      ],
    );
    assert.deepEqual(tokens(fresh.rows)[0], {
      prompt: [1, 2],
      response: [3, 4, 9, 5, 6],
      mask: [0, 0, 0, 1, 1],
      logprobs: [0, 0, 0, -0.5, -0.25],
    });
  } finally {
    await waiting.close();
  }
});
