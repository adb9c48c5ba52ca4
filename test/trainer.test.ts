import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { Baseline } from '../src/runtime/algorithm.js';
import { rollout } from '../src/runtime/agent.js';
import { Trainer } from '../src/runtime/trainer.js';
import { DuckDBStore } from '../src/store/store.js';
import { newTempDir, removeDir } from './helpers.js';
import { startOpenAITestServer, type OpenAITestServer } from './openai-server.js';

// The Trainer, in-process: store, server, recording and runners in this process, the Baseline
// algorithm driving them, the OpenAI-compatible test server as the model.

let dir: string;
let llm: OpenAITestServer;
before(async () => {
  dir = await newTempDir();
  llm = await startOpenAITestServer();
});
after(async () => {
  await llm.close();
  await removeDir(dir);
});

const agent = rollout<{ question: string }>(async (task, ctx) => {
  if (task.question === 'fail') throw new Error('no answer');
  const client = new OpenAI({ baseURL: ctx.llm!.baseURL, apiKey: ctx.llm!.apiKey });
  const answer = await client.chat.completions.create({ model: ctx.llm!.model, messages: [{ role: 'user', content: task.question }] });
  return answer.choices[0].message.content?.includes(task.question) ? 1 : 0;
});

test('fit with the Baseline: every task runs once, outcomes and rewards reported, everything stored', async () => {
  const db = join(dir, 'trainer.duckdb');
  const trainer = new Trainer({
    algorithm: new Baseline({ resources: { llm: { resource_type: 'llm', endpoint: llm.baseURL, model: 'test-model', api_key: null, sampling_parameters: {} } } }),
    nRunners: 2,
    db,
  });
  const result = await trainer.fit(agent, { train: [{ question: 'a' }, { question: 'b' }, { question: 'c' }], val: [{ question: 'fail' }] });
  assert.deepEqual([result.total, result.succeeded, result.failed, result.meanReward], [4, 3, 1, 1]);
  assert.deepEqual(result.rollouts.map((r) => [r.mode, r.status, r.reward]), [['train', 'succeeded', 1], ['train', 'succeeded', 1], ['train', 'succeeded', 1], ['val', 'failed', null]]);

  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const { rows } = await store.query('SELECT count(*)::INTEGER AS n FROM llm_calls', { guard: false });
    assert.equal(rows[0].n, 3);
  } finally {
    await store.close();
  }
  assert.throws(() => new Trainer({ algorithm: new Baseline(), strategy: 'processes' as never }), /strategy must be "in-process"/);
});
