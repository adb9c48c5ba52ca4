import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { traceToMessages } from '../../src/adapters/messages.js';
import { traceToTrajectories } from '../../src/adapters/trajectories.js';
import { DuckDBInstance } from '@duckdb/node-api';
import { lastTargetOf } from '../../src/collector/span-target.js';
import {
  derivedRowsOf,
  FRESH_ROW_MACROS,
  LOG_EVENT_VIEWS,
  ownCallsOnlySql,
  type SpanKeys,
} from '../../src/sql/derived.js';
import { llmCallsOfKeys } from '../../src/sql/views.js';
import { DuckDBStore } from '../../src/store/store.js';
import { finalRewardsSql } from '../../src/sql/final-rewards.js';
import { spanRows, type SpanInput } from '../../src/store/span-json.js';
import { attemptCallsSql, attemptRewardsSql } from '../../web/src/queries.js';
import { call, reward, span } from '../support/span-fixtures.js';
import {
  newTempDir,
  post,
  queryRows,
  removeDir,
  startAgl,
  type InProcessAgl,
  LLM_CALLS_SEARCH_PATH,
} from '../support/helpers.js';

// The reads that name the fresh-row macros (the dashboard's rollout page, the feedback route,
// the judge's transcripts, final rewards, the adapters' batches): the same rows whether the
// spans are derived now (the file's macros) or were derived before (derived_only's, no rows),
// and a span written after the derive is read at once.

let dir: string;
let agl: InProcessAgl;
const source = { stream: (sql: string) => agl.store.streamQuery(sql, { guard: false }) };

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(`${dir}/fresh.duckdb`, { deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  await write([...rolloutSpans('ro-a', 1, 0), ...rolloutSpans('ro-b', 2, 100)]);
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

const write = (spans: SpanInput[]) => agl.store.writeSpans(spanRows(...spans), 0);

/** An agent span, two calls in it and a reward after them, in trace `trace`. */
function rolloutSpans(rolloutId: string, trace: number, at: number): SpanInput[] {
  const agent = span({
    name: 'agent',
    start: at,
    end: at + 10,
    trace,
    rollout_id: rolloutId,
    attributes: { 'agent.name': 'solver' },
  });
  const inAgent = { trace, rollout_id: rolloutId, parent_id: agent.span_id };
  return [
    agent,
    call(`${rolloutId} first`, 'one', at + 1, inAgent),
    call(`${rolloutId} second`, 'two', at + 3, { ...inAgent, promptIds: [1, 2, 3, 4] }),
    reward(0.5, at + 5, inAgent),
  ];
}

const fastPath = async () =>
  String((await queryRows(agl.store, LLM_CALLS_SEARCH_PATH))[0].path)
    .split(',')
    .includes('derived_only');

/** The last call of trace 2, as the feedback route finds it (each request stores a reward span). */
async function feedbackTarget(): Promise<unknown> {
  const answer = await post(
    `${agl.url}/v1/agl/feedback`,
    JSON.stringify({ trace_id: '2'.padStart(32, '0'), name: 'thumbs', value: 1 }),
    { 'content-type': 'application/json' },
  );
  assert.equal(answer.status, 201, String(answer.body));
  return (JSON.parse(String(answer.body)) as { target_span_id: unknown }).target_span_id;
}

/** Every caller's rows of rollout ro-a (the feedback route's: of trace 2). */
async function reads(): Promise<Record<string, unknown>> {
  const rows = derivedRowsOf({ attemptIds: ['at-1'], rolloutIds: ['ro-a'] });
  const all: unknown[] = [];
  for await (const record of traceToMessages(source, { where: "rollout_id = 'ro-a'" })) all.push(record);
  return {
    rolloutCalls: await queryRows(agl.store, attemptCallsSql('ro-a', 'at-1')),
    rolloutRewards: await queryRows(agl.store, attemptRewardsSql('ro-a', 'at-1')),
    finalRewards: await queryRows(agl.store, `${finalRewardsSql('attempt', ['ro-a'])} ORDER BY rollout_id`),
    callRows: await queryRows(agl.store, `SELECT * FROM (${rows.calls}) ORDER BY span_id`),
    rewardRows: await queryRows(agl.store, `SELECT * FROM (${rows.rewards}) ORDER BY span_id, name`),
    agentRows: await queryRows(agl.store, `SELECT * FROM (${rows.agents}) ORDER BY span_id`),
    messages: all,
    trajectories: await traceToTrajectories(source, {
      otherAgents: 'mask',
      agentMatch: 'solver',
      credit: 'final',
      attempts: [{ rolloutId: 'ro-a', attemptId: 'at-1' }],
    }),
    feedbackTarget: await feedbackTarget(),
  };
}

test('the reads of a few rollouts give the same rows derived now and derived before; a span after the derive is read at once', async () => {
  assert.equal(await fastPath(), false, 'nothing is derived yet');
  const derivedNow = await reads();
  assert.equal((derivedNow.rolloutCalls as unknown[]).length, 2);
  assert.equal((derivedNow.messages as unknown[]).length, 2);
  assert.equal((derivedNow.trajectories as { rows: unknown[] }).rows.length, 2);
  assert.equal((derivedNow.agentRows as unknown[]).length, 1);
  await agl.store.deriveAll();
  assert.equal(await fastPath(), true);
  assert.deepEqual(await reads(), derivedNow);

  // A third call in ro-a and one in trace 2, after the derive: read at once, then derived, the same.
  await agl.store.deriveAll();
  await write([
    call('ro-a third', 'three', 8, { trace: 1, rollout_id: 'ro-a' }),
    call('ro-b third', 'three', 108, { trace: 2, rollout_id: 'ro-b' }),
  ]);
  assert.equal(await fastPath(), false);
  const late = await reads();
  assert.deepEqual(
    (late.rolloutCalls as { input_messages: unknown }[]).map((row) => row.input_messages),
    ['first', 'second', 'third'].map((step) => [{ role: 'user', content: `ro-a ${step}` }]),
  );
  assert.notEqual(late.feedbackTarget, derivedNow.feedbackTarget, 'the late call of trace 2 is the last');
  await agl.store.deriveAll();
  assert.equal(await fastPath(), true);
  assert.deepEqual(await reads(), late);
});

test('the macro of the calls not derived yet, read back from the file, parses each span once', async () => {
  const path = `${dir}/parse-once.duckdb`;
  const writer = await DuckDBStore.open({ path, deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  await writer.writeSpans(spanRows(...rolloutSpans('ro-p', 4, 0)), 0);
  await writer.close();
  // A macro read back from the file has lost MATERIALIZED (a read-only open, agl query --db):
  // the dialects' filters pushed down to the parse of the attributes were pasted onto it, 33
  // parses a span and twice the time of a read while the deriver is behind.
  const readOnly = await DuckDBStore.open({ path, readOnly: true });
  try {
    const sql = `EXPLAIN (FORMAT json) SELECT count(*) FROM ${FRESH_ROW_MACROS[0]}(NULL, NULL, NULL)`;
    const parses = JSON.stringify(await queryRows(readOnly, sql)).match(/json_extract_string\(attributes/g) ?? [];
    assert.ok(parses.length <= 1, `the plan parses the attributes ${parses.length} times`);
    assert.equal((await queryRows(readOnly, `SELECT * FROM ${FRESH_ROW_MACROS[0]}(NULL, NULL, NULL)`)).length, 2);
  } finally {
    await readOnly.close();
  }
});

test('a file an older agl wrote, opened read-only: the reads that name the fresh-row macros still work', async () => {
  const path = `${dir}/older.duckdb`;
  const older = await DuckDBStore.open({ path, deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  await older.writeSpans(spanRows(...rolloutSpans('ro-old', 3, 0)), 0);
  await older.close();
  // What an agl before the macros left: no fresh-row macros, views that do not name them.
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  for (const view of ['llm_calls', 'rewards', 'llm_call_rows', 'reward_rows', 'agent_spans'])
    await connection.run(`CREATE OR REPLACE VIEW ${view} AS SELECT 1 AS x`);
  for (const macro of FRESH_ROW_MACROS) await connection.run(`DROP MACRO TABLE ${macro}`);
  for (const view of LOG_EVENT_VIEWS) await connection.run(`DROP VIEW ${view}`);
  for (const schema of ['derived_only', 'no_log_events', 'own_calls_only'])
    await connection.run(`DROP SCHEMA ${schema} CASCADE`);
  connection.closeSync();
  instance.closeSync();
  const readOnly = await DuckDBStore.open({ path, readOnly: true });
  try {
    const rewards = await queryRows(
      readOnly,
      `SELECT value FROM (${derivedRowsOf({ rolloutIds: ['ro-old'] }).rewards})`,
    );
    assert.deepEqual(rewards, [{ value: 0.5 }]);
    const calls = await queryRows(readOnly, `SELECT * FROM ${FRESH_ROW_MACROS[0]}(NULL, NULL, NULL)`);
    assert.equal(calls.length, 2);
  } finally {
    await readOnly.close();
  }
});

test("a few rollouts' calls are planned as agl's own alone only while their spans hold no other dialect's", async () => {
  // ro-g: agl's own call, then an OpenLLMetry one that ends later, the attempt's last call.
  const own = call('ro-g first', 'one', 200, { trace: 5, rollout_id: 'ro-g' });
  const other = span({
    name: 'openai.chat',
    start: 202,
    end: 204,
    trace: 5,
    rollout_id: 'ro-g',
    attributes: {
      'gen_ai.system': 'openai',
      'gen_ai.prompt.0.role': 'user',
      'gen_ai.prompt.0.content': 'ro-g second',
      'gen_ai.completion.0.role': 'assistant',
      'gen_ai.completion.0.content': 'two',
    },
  });
  // ro-t: agl's own call and its LangChain tool span, which names GenAI keys and is no call.
  const tool = span({
    name: 'execute_tool search',
    start: 301,
    end: 302,
    trace: 6,
    rollout_id: 'ro-t',
    attributes: { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'search' },
  });
  // ro-c: a GenAI chat span whose content would come as log events: a call all the same.
  const chat = span({
    name: 'chat m',
    start: 400,
    end: 401,
    trace: 7,
    rollout_id: 'ro-c',
    attributes: { 'gen_ai.operation.name': 'chat', 'gen_ai.request.model': 'm' },
  });
  await write([own, other, call('ro-t first', 'one', 300, { trace: 6, rollout_id: 'ro-t' }), tool, chat]);
  const ownOnly = async (keys: SpanKeys) => (await queryRows(agl.store, ownCallsOnlySql(keys)))[0].own_only;
  const ownKeys = { rolloutIds: ['ro-t'] };
  const otherKeys = { rolloutIds: ['ro-g'], attemptIds: ['at-1'] };
  const sorted = (sql: string) => queryRows(agl.store, `SELECT * FROM (${sql}) ORDER BY span_id`);
  for (const state of ['not derived yet', 'derived']) {
    assert.equal(await ownOnly(ownKeys), true, state);
    assert.deepEqual(await sorted(llmCallsOfKeys(ownKeys, true)), await sorted(llmCallsOfKeys(ownKeys)), state);
    assert.equal(await ownOnly(otherKeys), false, `${state}: the OpenLLMetry call`);
    assert.equal(await ownOnly({ rolloutIds: ['ro-c'] }), false, `${state}: the GenAI chat span`);
    assert.equal((await sorted(llmCallsOfKeys({ rolloutIds: ['ro-c'] }))).length, 1, `${state}: its call`);
    assert.equal((await lastTargetOf(agl.store, otherKeys))?.span_id, other.span_id, state);
    await agl.store.deriveAll();
  }
});
