import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { LightningStore, RolloutQuery } from '../../src/api/lightning-store.js';
import type { RolloutState } from '../../src/store/rollout-state.js';
import { DuckDBStore } from '../../src/store/store.js';
import { tempDir } from '../support/helpers.js';

type Context = { after(fn: () => Promise<void>): void };

async function open(t: Context, path: string, finishedRolloutsInMemory?: number): Promise<DuckDBStore> {
  const store = await DuckDBStore.open({ path, finishedRolloutsInMemory });
  t.after(() => store.close());
  return store;
}

/** The rollouts the store's memory holds (what a server that runs for days must bound). */
const held = (store: DuckDBStore) => (store.lightning as unknown as { state: RolloutState }).state.rollouts.size;

/**
 * The same history in any store: named rollouts (so that two stores can be compared), ten
 * dequeued (nine finish in several ways, one runs), two queued; ids with a slash share a prefix.
 */
async function runHistory(ls: LightningStore): Promise<void> {
  const names = ['r', 'r/1', 'r/2', ...Array.from({ length: 7 }, (_, i) => `ro-${i}`)];
  await ls.enqueueManyRollouts(
    names.map((rollout_id, i) => ({
      rollout_id,
      input: i % 2 === 0 ? { question: `What is ${i} + 1?` } : `plain ${i}`,
      mode: i % 3 === 0 ? 'train' : i % 3 === 1 ? 'val' : undefined,
      config: { max_attempts: 2, retry_condition: ['failed'] },
    })),
  );
  for (const [i, rolloutId] of names.entries()) {
    const { attempt } = (await ls.dequeueRollout({ workerId: `w-${i % 2}` })) as { attempt: { attempt_id: string } };
    assert.equal((await ls.getRolloutById(rolloutId))?.status, 'preparing');
    if (i % 4 === 1) {
      // fails once, then succeeds on its second attempt
      await ls.updateAttempt(rolloutId, attempt.attempt_id, { status: 'failed' });
      const again = await ls.startAttempt(rolloutId);
      await ls.updateAttempt(rolloutId, again.attempt.attempt_id, { status: 'succeeded' });
    } else if (i % 4 === 2) {
      await ls.updateRollout(rolloutId, { status: 'cancelled' });
      await ls.updateAttempt(rolloutId, attempt.attempt_id, { status: 'cancelled' });
    } else {
      await ls.updateAttempt(rolloutId, attempt.attempt_id, { status: i === 8 ? 'running' : 'succeeded' });
    }
  }
  await ls.enqueueManyRollouts([
    { rollout_id: 'q-1', input: 'waiting 1' },
    { rollout_id: 'q-2', input: 'waiting 2', mode: 'val' },
  ]);
}

const QUERIES: RolloutQuery[] = [
  {},
  { limit: 3, offset: 2 },
  { status_in: ['succeeded'] },
  { status_in: ['queuing', 'running'] },
  { status_in: ['cancelled', 'queuing'], sort_by: 'rollout_id', sort_order: 'desc' },
  { rollout_id_in: ['r', 'r/2', 'q-1', 'none'] },
  { rollout_id_contains: 'r/' },
  { mode_in: ['val'], sort_by: 'end_time', sort_order: 'desc' },
  { mode_in: ['train'], sort_by: 'end_time' },
  { input_contains: 'What is', sort_by: 'start_time', sort_order: 'desc', limit: 2 },
  { input_contains: '+ 1', mode_in: ['val'], filter_logic: 'or' },
  { status_in: ['failed', 'succeeded'], rollout_id_contains: 'ro-', filter_logic: 'and', sort_by: 'status' },
  { sort_by: 'mode', offset: 11 },
  // The newest, held in memory while they started after every rollout let go of; then not.
  { sort_by: 'start_time', sort_order: 'desc', limit: 2 },
  { sort_by: 'start_time', sort_order: 'desc', limit: 3, offset: 1 },
  // Agent Lightning v1's terminal cursor: past the rollouts let go of, held in memory; then not.
  { status_in: ['succeeded', 'failed', 'cancelled'], sort_by: 'end_time', offset: 7, limit: 5 },
  { status_in: ['cancelled', 'succeeded', 'failed', 'running'], sort_by: 'end_time', offset: 2, limit: 5 },
];

/** What a query answers, without the times (two stores ran the history at different times). */
async function answers(ls: LightningStore) {
  return Promise.all(
    QUERIES.map(async (query) => {
      const page = await ls.queryRollouts(query);
      return {
        query,
        total: page.total,
        items: page.items.map((r) => [
          r.rollout_id,
          r.status,
          r.mode,
          r.input,
          'attempt' in r ? [r.attempt.sequence_id, r.attempt.status] : null,
        ]),
      };
    }),
  );
}

test('finished rollouts beyond those kept in memory are read from the file, answering as if held', async (t) => {
  const dir = await tempDir(t);
  const reference = await open(t, join(dir, 'reference.duckdb'));
  const bounded = await open(t, join(dir, 'bounded.duckdb'), 2);
  await runHistory(reference.lightning);
  await runHistory(bounded.lightning);
  // 9 finished rollouts, 2 kept (an eighth more before letting go), 1 running, 2 queued.
  assert.equal(held(bounded), 5);
  assert.equal(held(reference), 12);

  assert.deepEqual(await answers(bounded.lightning), await answers(reference.lightning));
  const ls = bounded.lightning;
  const stats = await ls.statistics();
  assert.deepEqual([stats.total_rollouts, stats.total_attempts], [12, 13]);
  assert.deepEqual(
    (await ls.queryAttempts('r/1')).items.map((a) => [a.sequence_id, a.status]),
    [
      [1, 'failed'],
      [2, 'succeeded'],
    ],
    "a rollout's attempts, not those of another whose id it begins",
  );
  assert.equal((await ls.getLatestAttempt('r'))?.status, 'succeeded');
  assert.equal((await ls.getRolloutById('r/2'))?.status, 'cancelled');
  assert.equal(await ls.getRolloutById('nowhere'), null);
  assert.deepEqual(
    (await ls.waitForRollouts(['r', 'ro-6', 'q-1', 'nowhere'], 0)).map((r) => r.rollout_id),
    ['r', 'ro-6'],
    'finished rollouts are waited for wherever they are; unknown and queued ones are left out',
  );
});

test('a rollout read from the file is taken back to change it, and is not made twice', async (t) => {
  const path = join(await tempDir(t), 'changes.duckdb');
  const first = await open(t, path, 0);
  const ls = first.lightning;
  await runHistory(ls);
  assert.equal(held(first), 3, 'only what runs or waits');

  const [again] = await ls.enqueueManyRollouts([{ rollout_id: 'r', input: 'changed' }]);
  assert.deepEqual([again.status, again.input], ['succeeded', { question: 'What is 0 + 1?' }], 'a retried enqueue');
  await assert.rejects(ls.startRollout({ rollout_id: 'ro-0', input: 'x' }), /exists already/);
  await ls.updateRollout('ro-0', { metadata: { reviewed: true } });
  const attempt = await ls.startAttempt('r/1', 'w-9');
  assert.equal(attempt.attempt.sequence_id, 3);
  await ls.updateAttempt('r/1', attempt.attempt.attempt_id, { status: 'succeeded' });
  const stats = await ls.statistics();
  assert.deepEqual([stats.total_rollouts, stats.total_attempts], [12, 14]);

  // Opened again, the file answers the same, and the memory holds what runs and waits.
  await first.close();
  const reopened = await open(t, path, 0);
  assert.equal(held(reopened), 3);
  const rl = reopened.lightning;
  assert.deepEqual((await rl.getRolloutById('ro-0'))?.metadata, { reviewed: true });
  assert.equal((await rl.queryAttempts('r/1')).total, 3);
  assert.equal((await rl.queryRollouts({ rollout_id_in: ['r'] })).total, 1);
  assert.deepEqual(
    (await rl.queryRollouts({ status_in: ['queuing'] })).items.map((r) => r.rollout_id),
    ['q-1', 'q-2'],
  );
  const reopenedStats = await rl.statistics();
  assert.deepEqual([reopenedStats.total_rollouts, reopenedStats.total_attempts], [12, 14]);
  const next = await rl.dequeueRollout();
  assert.equal(next?.rollout_id, 'q-1', 'the queue is as it was');
});
