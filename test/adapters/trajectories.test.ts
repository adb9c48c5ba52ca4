import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { collect } from '../../src/adapters/adapter.js';
import type { QuerySource } from '../../src/adapters/source.js';
import {
  TRAJECTORIES_ADAPTER,
  traceToTrajectories,
  type TrajectoryOptions,
  type TrajectoryRow,
  type TrajectoryStats,
} from '../../src/adapters/trajectories.js';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward, span } from '../support/span-fixtures.js';

// Token-level rows from span fixtures: transitions, merged trajectories with masks, limits,
// calls without token ids; each read both ways: built in JS from the calls (traceToTrajectories,
// the GRPO batch's path) and in SQL (the adapter, which `agl export` writes with COPY).

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

type Read = (
  source: QuerySource,
  options?: TrajectoryOptions,
) => Promise<{ rows: TrajectoryRow[]; stats: TrajectoryStats }>;
const readers: Record<string, Read> = {
  js: async (from, options) => {
    const { rows, stats } = await traceToTrajectories(from, options);
    return { rows, stats };
  },
  sql: async (from, options) => {
    const { batches, stats } = await TRAJECTORIES_ADAPTER.read(from, options);
    return { rows: await collect(batches), stats };
  },
};

const shape = (rows: Awaited<ReturnType<Read>>['rows']) =>
  rows.map((r) => ({
    prompt: r.prompt_ids,
    response: r.response_ids,
    mask: r.response_mask,
    reward: r.reward,
    calls: r.calls,
  }));

for (const [name, read] of Object.entries(readers)) {
  test(`${name}: transition: one row per call with token ids; calls without them are counted, never empty rows`, async () => {
    const { rows, stats } = await read(source, { mode: 'transition' });
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

  test(`${name}: trajectory: a continuing call merges, the inserted tokens masked out; a break starts a new row`, async () => {
    const { rows } = await read(source, { mode: 'trajectory' });
    assert.deepEqual(shape(rows), [
      { prompt: [1, 2], response: [3, 4, 9, 9, 5], mask: [1, 1, 0, 0, 1], reward: 1, calls: 2 },
      { prompt: [7], response: [8], mask: [1], reward: 0.5, calls: 1 },
    ]);
    assert.deepEqual(rows[0].response_logprobs, [-0.1, -0.2, 0, 0, 0]);
  });

  test(`${name}: length limits truncate or drop, and say how many`, async () => {
    const truncated = await read(source, { mode: 'trajectory', maxResponseLength: 3, maxPromptLength: 1 });
    assert.deepEqual(
      shape(truncated.rows).map((r) => [r.prompt, r.response, r.mask]),
      [
        [[2], [3, 4, 9], [1, 1, 0]],
        [[7], [8], [1]],
      ],
    );
    assert.equal(truncated.stats.truncated, 1);
    const dropped = await read(source, { mode: 'trajectory', maxResponseLength: 3, overlong: 'drop' });
    assert.equal(dropped.rows.length, 1);
    assert.equal(dropped.stats.dropped, 1);
    await assert.rejects(read(source, { maxPromptLength: 0 }), /maxPromptLength must be a whole number above 0/);
  });
}

test('the rows built in SQL are those built in JS, derived or not, other agents masked or dropped', async () => {
  const own = await DuckDBStore.open({ path: join(dir, 'agents.duckdb') });
  const from = { stream: (sql: string) => own.streamQuery(sql, { guard: false }) };
  try {
    const at = { rollout_id: 'ro-m', attempt_id: 'at-1', trace: 2 };
    const solver = span({ ...at, name: 'solver', start: 1, end: 90, attributes: { 'agent.name': 'solver' } });
    const helper = span({
      ...at,
      name: 'helper',
      start: 15,
      end: 25,
      attributes: { 'agent.name': 'helper' },
      parent_id: solver.span_id,
    });
    const under = (parent: { span_id: string }) => ({ ...at, parent_id: parent.span_id });
    await own.writeSpans(
      spanRows(
        solver,
        helper,
        call('a', 'A', 10, { ...under(solver), promptIds: [1, 2], responseIds: [3], logprobs: [-0.5] }),
        call('b', 'B', 20, { ...under(helper), promptIds: [1, 2, 3, 7], responseIds: [8], logprobs: [-0.25] }),
        call('c', 'C', 30, { ...under(solver), promptIds: [1, 2, 3, 7, 8, 6], responseIds: [4] }),
        call('d', 'D', 40, { ...under(solver), promptIds: [5], responseIds: [] }),
        reward(1, 50, at),
        call('e', 'E', 60, { ...under(helper), promptIds: [9], responseIds: [9, 9] }),
      ),
      0,
    );
    const masked = await readers.sql(from, { mode: 'trajectory', agentMatch: '^solver$', otherAgents: 'mask' });
    assert.deepEqual(shape(masked.rows), [
      { prompt: [1, 2], response: [3, 7, 8, 6, 4], mask: [1, 0, 0, 0, 1], reward: null, calls: 3 },
    ]);
    assert.deepEqual(masked.rows[0].response_logprobs, [-0.5, 0, 0, 0, 0]);
    assert.equal(masked.stats.untrained, 1); // the helper's call after the reward, alone in its row
    // Another rollout's call, not derived yet either: a batch of ro-m's attempt derives ro-m's spans alone.
    await own.writeSpans(
      spanRows(
        call('x', 'X', 10, { rollout_id: 'ro-x', attempt_id: 'at-x', trace: 3, promptIds: [4], responseIds: [5] }),
      ),
      0,
    );
    const batch: TrajectoryOptions = {
      mode: 'trajectory',
      agentMatch: '^solver$',
      otherAgents: 'mask',
      attempts: [{ rolloutId: 'ro-m', attemptId: 'at-1' }],
    };
    const batchBefore = await traceToTrajectories(from, batch);
    assert.deepEqual(batchBefore.rows, masked.rows);
    const optionSets: TrajectoryOptions[] = [
      batch,
      {},
      { mode: 'trajectory' },
      { mode: 'trajectory', agentMatch: '^solver$', otherAgents: 'mask' },
      { mode: 'trajectory', agentMatch: '^solver$' },
      { mode: 'trajectory', credit: 'discounted', gamma: 0.5, maxResponseLength: 2 },
      { mode: 'transition', maxPromptLength: 2, overlong: 'drop' },
    ];
    const compare = async () => {
      for (const options of optionSets)
        assert.deepEqual(await readers.sql(from, options), await readers.js(from, options), JSON.stringify(options));
    };
    await compare();
    await own.deriveAll(); // the default options now read the deriver's answer per call
    await compare();
    assert.deepEqual(await traceToTrajectories(from, batch), batchBefore); // a GRPO batch's read, derived or not
  } finally {
    await own.close();
  }
});
