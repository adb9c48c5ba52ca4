import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { startTelemetry } from '../../src/instrumentation/telemetry.js';
import { rollout } from '../../src/runner/agent.js';
import { Runner } from '../../src/runner/runner.js';
import {
  newTempDir,
  removeDir,
  startAgl,
  type InProcessAgl,
  queryRows,
  eventually,
  messagesIn,
} from '../support/helpers.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// The Runner in this process, recording like `agl/register` does, against an agl server with
// its gateway and the OpenAI-compatible test server as the model.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'runner.duckdb'));
  llm = await startOpenAITestServer();
  process.env.AGL_ENDPOINT = agl.url;
  process.env.OTEL_SERVICE_NAME = 'runner-test';
  startTelemetry();
});
after(async () => {
  await agl.close();
  await llm.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);

/** Answers the question through the rollout's llm; reward 1 when the answer echoes it. */
const echoAgent = rollout<{ question: string }>(async (task, ctx) => {
  if (task.question === 'fail') throw new Error('the agent gave up');
  const { llm } = ctx;
  if (!llm) throw new Error('the rollout has no llm resource');
  const client = new OpenAI({ baseURL: llm.baseURL, apiKey: llm.apiKey });
  const prompt = ctx.promptTemplate ? ctx.promptTemplate.format({ question: task.question }) : task.question;
  const answer = await client.chat.completions.create({
    model: llm.model,
    messages: [{ role: 'user', content: prompt }],
  });
  return answer.choices[0].message.content?.includes(task.question) ? 1 : 0;
});

const resources = () => ({
  llm: {
    resource_type: 'llm' as const,
    endpoint: llm.baseURL,
    model: 'test-model',
    api_key: null,
    sampling_parameters: {},
  },
  prompt: {
    resource_type: 'prompt_template' as const,
    template: 'Please answer: {question}',
    engine: 'f-string' as const,
  },
});

test('a runner takes queued rollouts, runs them concurrently and reports each; spans land in their own rollout', async () => {
  const { resources_id } = await agl.store.lightning.addResources(resources());
  const questions = ['alpha', 'beta', 'fail', 'delta', 'epsilon'];
  const queued = await agl.store.lightning.enqueueManyRollouts(
    questions.map((question) => ({ input: { question }, resources_id })),
  );
  const events: string[] = [];
  const runner = new Runner({
    store: agl.store.lightning,
    agent: echoAgent,
    concurrency: 3,
    maxRollouts: 5,
    gatewayUrl: agl.url,
    hooks: {
      onRolloutStart: (r) => void events.push(`start ${r.rollout_id}`),
      onTraceStart: (r) => void events.push(`trace ${r.rollout_id}`),
      onTraceEnd: (r) => void events.push(`traced ${r.rollout_id}`),
      onRolloutEnd: (r, o) => void events.push(`end ${r.rollout_id} ${o.status}`),
    },
  });
  assert.deepEqual(await runner.run(), { rollouts: 5 });

  for (const [i, { rollout_id }] of queued.entries()) {
    const done = await agl.store.lightning.getRolloutById(rollout_id);
    assert.equal(done?.status, questions[i] === 'fail' ? 'failed' : 'succeeded', questions[i]);
    const order = ['start', 'trace', 'traced', 'end'].map((hook) =>
      events.findIndex((e) => e.startsWith(`${hook} ${rollout_id}`)),
    );
    assert.deepEqual(
      [...order].sort((a, b) => a - b),
      order,
      `hook order of ${rollout_id}: ${events.join(', ')}`,
    );
    assert.ok(order[0] >= 0);
  }
  const rewards = await rows(
    `SELECT rollout_id, value FROM rewards WHERE rollout_id IN (${queued.map((r) => `'${r.rollout_id}'`).join(',')})`,
  );
  assert.equal(rewards.length, 4);
  assert.ok(rewards.every((r) => r.value === 1));
  const calls = await eventually(
    agl.store,
    `SELECT rollout_id, input_messages FROM llm_calls WHERE rollout_id IN (${queued.map((r) => `'${r.rollout_id}'`).join(',')})`,
    4,
  );
  assert.equal(calls.length, 4, 'one row per call (the gateway one)');
  for (const call of calls) {
    const question = questions[queued.findIndex((r) => r.rollout_id === call.rollout_id)];
    assert.equal(messagesIn(call.input_messages)[0].content, `Please answer: ${question}`);
  }
  const failed = queued[2].rollout_id;
  const [exception] = await rows(
    `SELECT attributes->>'exception.message' AS message FROM spans WHERE rollout_id = '${failed}' AND name = 'agentlightning.exception'`,
  );
  assert.equal(exception.message, 'the agent gave up');
  const attempt = await agl.store.lightning.getLatestAttempt(failed);
  assert.deepEqual(attempt?.metadata, { error: 'the agent gave up' });
});

test('50 rollouts at once: every LLM call and reward lands in its own rollout', async () => {
  const { resources_id } = await agl.store.lightning.addResources(resources());
  const questions = Array.from({ length: 50 }, (_, i) => `q${i}`);
  const queued = await agl.store.lightning.enqueueManyRollouts(
    questions.map((question) => ({ input: { question }, resources_id })),
  );
  assert.deepEqual(
    await new Runner({ store: agl.store.lightning, agent: echoAgent, concurrency: 50, maxRollouts: 50 }).run(),
    { rollouts: 50 },
  );
  const ids = queued.map((r) => `'${r.rollout_id}'`).join(',');
  // Without gatewayUrl the agent calls the model directly: each row is the agent's own capture.
  const calls = await eventually(
    agl.store,
    `SELECT rollout_id, input_messages FROM llm_calls WHERE rollout_id IN (${ids})`,
    50,
  );
  assert.equal(calls.length, 50);
  for (const call of calls)
    assert.equal(
      messagesIn(call.input_messages)[0].content,
      `Please answer: ${questions[queued.findIndex((r) => r.rollout_id === call.rollout_id)]}`,
    );
  const rewards = await rows(
    `SELECT rollout_id, count(*)::INTEGER AS n FROM rewards WHERE rollout_id IN (${ids}) GROUP BY rollout_id`,
  );
  assert.equal(rewards.length, 50);
  assert.ok(rewards.every((r) => r.n === 1));
});

test('onStop abandon: a stop reports the rollouts in flight failed at once, their signals aborted', async () => {
  let aborted = false;
  let listening!: () => void;
  const agentListens = new Promise<void>((resolve) => (listening = resolve));
  const slow = rollout(async (_task, ctx) => {
    ctx.signal.addEventListener('abort', () => (aborted = true));
    listening();
    await new Promise((resolve) => setTimeout(resolve, 60_000).unref());
    return 1;
  });
  const [queued] = await agl.store.lightning.enqueueManyRollouts([{ input: null }]);
  const stop = new AbortController();
  const runner = new Runner({ store: agl.store.lightning, agent: slow, onStop: 'abandon' });
  const running = runner.run(stop.signal);
  // The agent's own word, not the attempt's 'running' status: that can show a moment before the
  // agent runs (under load, a stop then came before it listened, and the test failed).
  await agentListens;
  stop.abort();
  await running;
  assert.ok(aborted);
  const attempt = await agl.store.lightning.getLatestAttempt(queued.rollout_id);
  assert.deepEqual([attempt?.status, attempt?.metadata], ['failed', { error: 'abandoned: the runner was stopped' }]);
  assert.throws(
    () => new Runner({ store: agl.store.lightning, agent: slow, onStop: 'later' as never }),
    /onStop must be finish or abandon/,
  );
});

test('step runs one task directly and returns the rollout with its spans', async () => {
  const runner = new Runner({ store: agl.store.lightning, agent: echoAgent });
  const { rollout: done, spans } = await runner.step({ question: 'gamma' }, resources());
  assert.equal(done.status, 'succeeded');
  assert.ok(
    spans.some((s) => s.name === 'agentlightning.annotation' && s.attributes['agentlightning.reward.0.value'] === 1),
  );
  assert.ok(
    spans.some((s) => s.name === 'chat test-model'),
    "the agent's own LLM call",
  );
});

test('an agent that returns something else than a number fails its attempt with the reason', async () => {
  const runner = new Runner({ store: agl.store.lightning, agent: rollout(async () => 'yes' as never) });
  const { rollout: done } = await runner.step(null);
  assert.equal(done.status, 'failed');
  assert.deepEqual((await agl.store.lightning.getLatestAttempt(done.rollout_id))?.metadata, {
    error: 'the agent returned string; it returns its reward as a finite number, or nothing',
  });
  assert.throws(
    () => new Runner({ store: agl.store.lightning, agent: echoAgent, concurrency: 0 }),
    /concurrency must be a whole number of at least 1/,
  );
});
