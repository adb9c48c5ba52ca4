import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { arrowTableOf } from '../../src/adapters/arrow.js';
import { traceToTriplets } from '../../src/adapters/triplets.js';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward, span } from '../support/span-fixtures.js';

// Triplets from span fixtures with exact expected outputs: reward matching, credit, dedupe,
// agent match, rollout-less traces.

let dir: string;
let store: DuckDBStore;
const source = { stream: (sql: string) => store.streamQuery(sql, { guard: false }) };

before(async () => {
  dir = await newTempDir();
  store = await DuckDBStore.open({ path: join(dir, 'triplets.duckdb') });
  const planner = span({ name: 'plan', start: 1, end: 100, attributes: { 'agent.name': 'planner' } });
  const coder = span({ name: 'code', start: 1, end: 100, attributes: { 'gen_ai.agent.name': 'coder' } });
  const c3 = call('c', 'C', 30, { parent_id: coder.span_id });
  await store.writeSpans(
    spanRows(
      planner,
      coder,
      call('a', 'A', 10, { parent_id: planner.span_id }),
      reward(1, 15, { parent_id: planner.span_id }),
      call('b', 'B', 20, { parent_id: coder.span_id }),
      c3,
      // The same call recorded twice (a retry recorded again, same response id): one triplet.
      call('c', 'C', 30.5, { parent_id: coder.span_id, responseId: 'resp-c' }),
      reward(0.5, 40, { parent_id: coder.span_id }),
      // A trace without rollout: its own group.
      call('solo', 'S', 5, { rollout_id: null, attempt_id: null, trace: 2 }),
      reward(0.25, 9, { rollout_id: null, attempt_id: null, trace: 2 }),
    ),
    0,
  );
});
after(async () => {
  await store.close();
  await removeDir(dir);
});

const summary = (triplets: Awaited<ReturnType<typeof traceToTriplets>>) =>
  triplets.map((t) => [
    t.metadata.rollout_id ?? t.metadata.trace_id.slice(-1),
    (t.prompt.messages as { content: string }[])[0].content,
    t.reward,
  ]);

test('step credit with first_occurrence: each reward to the latest call before it without one', async () => {
  const triplets = await traceToTriplets(source);
  assert.deepEqual(summary(triplets), [
    ['ro-t', 'a', 1],
    ['ro-t', 'b', null],
    ['ro-t', 'c', 0.5],
    ['2', 'solo', 0.25],
  ]);
  const first = triplets[0];
  assert.deepEqual(first.response, { message: { role: 'assistant', content: 'A' }, token_ids: [3], logprobs: null });
  assert.deepEqual(first.prompt.token_ids, [1, 2]);
  assert.deepEqual(
    { ...first.metadata, trace_id: undefined, span_id: undefined },
    {
      rollout_id: 'ro-t',
      attempt_id: 'at-1',
      trace_id: undefined,
      span_id: undefined,
      sequence_id: first.metadata.sequence_id,
      agent_name: 'planner',
      response_id: 'resp-a',
      model: 'm',
    },
  );
  assert.deepEqual(
    triplets.map((t) => t.metadata.agent_name),
    ['planner', 'coder', 'coder', null],
  );
});

test('final and discounted credit', async () => {
  assert.deepEqual(
    summary(await traceToTriplets(source, { credit: 'final' })).map((t) => t[2]),
    [0.5, 0.5, 0.5, 0.25],
  );
  // Returns with gamma 0.5: c = 0.5, b = 0 + 0.5 * 0.5, a = 1 + 0.5 * 0.25.
  assert.deepEqual(
    summary(await traceToTriplets(source, { credit: 'discounted', gamma: 0.5 })).map((t) => t[2]),
    [1.125, 0.25, 0.5, 0.25],
  );
});

test('first_sibling: a reward only goes to a call under the same parent', async () => {
  // The 0.5 reward sits under the coder, beside b and c; the 1 under the planner, beside a.
  assert.deepEqual(
    summary(await traceToTriplets(source, { rewardMatch: 'first_sibling' })).map((t) => t[2]),
    [1, null, 0.5, 0.25],
  );
});

test('agentMatch trains one agent alone; where and spanMatch narrow the calls', async () => {
  assert.deepEqual(
    summary(await traceToTriplets(source, { agentMatch: '^cod' })).map((t) => t[1]),
    ['b', 'c'],
  );
  assert.deepEqual(
    summary(await traceToTriplets(source, { where: "rollout_id = 'ro-t'" })).map((t) => t[1]),
    ['a', 'b', 'c'],
  );
  assert.deepEqual(summary(await traceToTriplets(source, { spanMatch: '^nothing' })), []);
});

test('as an apache-arrow Table: typed columns, the same values', async () => {
  const table = await arrowTableOf('triplets', await traceToTriplets(source));
  assert.equal(table.numRows, 4);
  assert.deepEqual([...(table.getChild('reward') ?? [])], [1, null, 0.5, 0.25]);
  const first = table.get(0)?.toJSON();
  assert.ok(first);
  assert.deepEqual(
    [JSON.parse(first.prompt.messages)[0].content, [...first.response.token_ids], first.metadata.agent_name],
    ['a', [3], 'planner'],
  );
});

test('bad options are refused with the reason', async () => {
  await assert.rejects(traceToTriplets(source, { credit: 'all' as never }), /credit must be step, final or discounted/);
  await assert.rejects(traceToTriplets(source, { gamma: 2 }), /gamma must be from 0 to 1/);
  await assert.rejects(traceToTriplets(source, { agentMatch: '(' }), /not a regular expression/);
});
