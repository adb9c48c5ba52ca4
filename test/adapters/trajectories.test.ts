import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { traceToTrajectories } from '../../src/adapters/trajectories.js';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward } from '../support/span-fixtures.js';

// Token-level rows from span fixtures: transitions, merged trajectories with masks, limits,
// calls without token ids.

let dir: string;
let store: DuckDBStore;
const source = { stream: (sql: string) => store.streamQuery(sql, { guard: false }) };

before(async () => {
  dir = await newTempDir();
  store = await DuckDBStore.open({ path: join(dir, 'trajectories.duckdb') });
  const at = { rollout_id: 'ro-j', attempt_id: 'at-1' };
  await store.writeSpans(
    spanRows(
      call('one', 'A', 10, { ...at, promptIds: [1, 2], responseIds: [3, 4], logprobs: [-0.1, -0.2] }),
      // Continues the first: its prompt is prompt + response + a tool result [9, 9].
      call('two', 'B', 20, { ...at, promptIds: [1, 2, 3, 4, 9, 9], responseIds: [5] }),
      reward(1, 25, at),
      call('three', 'C', 30, { ...at, promptIds: [7], responseIds: [8] }),
      reward(0.5, 35, at),
      call('four', 'D', 40, { ...at, promptIds: [], responseIds: [] }),
    ),
    0,
  );
});
after(async () => {
  await store.close();
  await removeDir(dir);
});

const shape = (rows: Awaited<ReturnType<typeof traceToTrajectories>>['rows']) =>
  rows.map((r) => ({
    prompt: r.prompt_ids,
    response: r.response_ids,
    mask: r.response_mask,
    reward: r.reward,
    calls: r.calls,
  }));

test('transition: one row per call with token ids; calls without them are counted, never empty rows', async () => {
  const { rows, stats } = await traceToTrajectories(source, { mode: 'transition' });
  assert.deepEqual(shape(rows), [
    { prompt: [1, 2], response: [3, 4], mask: [1, 1], reward: null, calls: 1 },
    { prompt: [1, 2, 3, 4, 9, 9], response: [5], mask: [1], reward: 1, calls: 1 },
    { prompt: [7], response: [8], mask: [1], reward: 0.5, calls: 1 },
  ]);
  assert.deepEqual(rows[0].response_logprobs, [-0.1, -0.2]);
  assert.equal(rows[0].group_key, 'ro-j');
  assert.deepEqual(stats, {
    calls: 4,
    rows: 3,
    truncated: 0,
    dropped: 0,
    missingTokenIds: 1,
    missingTokenIdRollouts: ['ro-j'],
    untrained: 0,
  });
});

test('trajectory: a continuing call merges, the inserted tokens masked out; a break starts a new row', async () => {
  const { rows } = await traceToTrajectories(source, { mode: 'trajectory' });
  assert.deepEqual(shape(rows), [
    { prompt: [1, 2], response: [3, 4, 9, 9, 5], mask: [1, 1, 0, 0, 1], reward: 1, calls: 2 },
    { prompt: [7], response: [8], mask: [1], reward: 0.5, calls: 1 },
  ]);
  assert.deepEqual(rows[0].response_logprobs, [-0.1, -0.2, 0, 0, 0]);
});

test('length limits truncate or drop, and say how many', async () => {
  const truncated = await traceToTrajectories(source, { mode: 'trajectory', maxResponseLength: 3, maxPromptLength: 1 });
  assert.deepEqual(
    shape(truncated.rows).map((r) => [r.prompt, r.response, r.mask]),
    [
      [[2], [3, 4, 9], [1, 1, 0]],
      [[7], [8], [1]],
    ],
  );
  assert.equal(truncated.stats.truncated, 1);
  const dropped = await traceToTrajectories(source, { mode: 'trajectory', maxResponseLength: 3, overlong: 'drop' });
  assert.equal(dropped.rows.length, 1);
  assert.equal(dropped.stats.dropped, 1);
  await assert.rejects(
    traceToTrajectories(source, { maxPromptLength: 0 }),
    /maxPromptLength must be a whole number above 0/,
  );
});
