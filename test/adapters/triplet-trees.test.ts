import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { traceToTriplets, type TripletOptions } from '../../src/adapters/triplets.js';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward, span } from '../support/span-fixtures.js';

// Triplets over imperfect span trees and many rewards, each rollout its own case, with exact
// expected outputs: the reward stack, orphans and roots (virtual nodes), flat spans repaired
// under the span that contains them, agents named on the call itself, minReward.

let dir: string;
let store: DuckDBStore;
const source = { stream: (sql: string) => store.streamQuery(sql, { guard: false }) };
const MISSING = 'feedfacefeedface';

before(async () => {
  dir = await newTempDir();
  store = await DuckDBStore.open({ path: join(dir, 'trees.duckdb'), deriveWhenIdleMs: Infinity });
  const stack = { rollout_id: 'ro-stack', trace: 11 };
  const orphans = { rollout_id: 'ro-orphans', trace: 12 };
  const flat = { rollout_id: 'ro-flat', trace: 13 };
  const worker = span({ name: 'worker', start: 10, end: 20, attributes: { 'agent.name': 'worker' }, ...flat });
  await store.writeSpans(
    spanRows(
      // Calls end at 2, 4 and 6. Rewards: 5 -> b (the latest ended), 5.5 -> a (b is taken),
      // 6 -> c (ended as it was given), 8 -> none left; 0.5 came before any call ended.
      reward(9, 0.5, stack),
      call('a', 'A', 1, stack),
      call('b', 'B', 3, stack),
      call('c', 'C', 5, stack),
      reward(1, 5, stack),
      reward(2, 5.5, stack),
      reward(3, 6, stack),
      reward(4, 8, stack),
      // Two calls whose parent never arrived hang under it as a virtual node, with the reward
      // given under it; a root call and a root reward share the virtual root.
      call('x', 'X', 1, { ...orphans, parent_id: MISSING }),
      call('y', 'Y', 3, { ...orphans, parent_id: MISSING }),
      call('root', 'R', 5, orphans),
      reward(0.5, 7, { ...orphans, parent_id: MISSING }),
      reward(0.25, 8, orphans),
      // A call and a reward emitted flat, inside the worker agent's time.
      worker,
      call('flat', 'F', 12, flat),
      reward(0.75, 14, flat),
      call('self', 'S', 30, {
        ...flat,
        attributes: { ...call('self', 'S', 30).attributes, 'gen_ai.agent.name': 'critic' },
      }),
    ),
    0,
  );
});
after(async () => {
  await store.close();
  await removeDir(dir);
});

const rewardsOf = async (rollout: string, options: TripletOptions = {}) =>
  (await traceToTriplets(source, { ...options, where: `rollout_id = '${rollout}'` })).map((t) => [
    (t.prompt.messages as { content: string }[])[0].content,
    t.reward,
  ]);

test('rewards are matched like a stack: the latest call that ended before, not taken yet', async () => {
  assert.deepEqual(await rewardsOf('ro-stack'), [
    ['a', 2],
    ['b', 1],
    ['c', 3],
  ]);
  assert.deepEqual(await rewardsOf('ro-stack', { credit: 'final' }), [
    ['a', 4],
    ['b', 4],
    ['c', 4],
  ]);
});

test('orphans hang under their missing parent, roots under the virtual root (first_sibling)', async () => {
  assert.deepEqual(await rewardsOf('ro-orphans', { rewardMatch: 'first_sibling' }), [
    ['x', null],
    ['y', 0.5],
    ['root', 0.25],
  ]);
  // first_occurrence ignores the tree: 0.5 goes to the latest call (root), 0.25 to y.
  assert.deepEqual(await rewardsOf('ro-orphans'), [
    ['x', null],
    ['y', 0.25],
    ['root', 0.5],
  ]);
});

test('repairFlat moves flat spans under the innermost span containing them', async () => {
  const plain = await traceToTriplets(source, { where: "rollout_id = 'ro-flat'", rewardMatch: 'first_sibling' });
  assert.deepEqual(
    plain.map((t) => [t.metadata.agent_name, t.reward]),
    [
      [null, 0.75],
      ['critic', null],
    ],
  );
  const repaired = await traceToTriplets(source, {
    where: "rollout_id = 'ro-flat'",
    rewardMatch: 'first_sibling',
    repairFlat: true,
  });
  assert.deepEqual(
    repaired.map((t) => [t.metadata.agent_name, t.reward]),
    [
      ['worker', 0.75],
      ['critic', null],
    ],
  );
  assert.deepEqual(
    (await traceToTriplets(source, { agentMatch: '^work', repairFlat: true })).map((t) => t.metadata.span_id),
    [repaired[0].metadata.span_id],
  );
});

test('minReward keeps the attempts whose final reward reaches it', async () => {
  const rollouts = async (minReward: number) => [
    ...new Set((await traceToTriplets(source, { minReward })).map((t) => t.metadata.rollout_id)),
  ];
  assert.deepEqual(await rollouts(0.5), ['ro-flat', 'ro-stack']);
  assert.deepEqual(await rollouts(1), ['ro-stack']);
});

test('triplets are the same whether their spans were derived on the fly or by the deriver', async () => {
  const options: TripletOptions = { rewardMatch: 'first_sibling', repairFlat: true, credit: 'discounted', gamma: 0.5 };
  const before = await traceToTriplets(source, options);
  assert.ok((await store.deriveAll()) > 0);
  assert.deepEqual(await traceToTriplets(source, options), before);
});
