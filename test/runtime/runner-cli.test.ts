import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  eventually,
  newTempDir,
  removeDir,
  runCli,
  startAgl,
  type InProcessAgl,
  queryRows,
} from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// `agl runner` as a process: an agent module, and a shell script agent with --exec.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  llm = await startOpenAITestServer();
  agl = await startAgl(join(dir, 'runner-cli.duckdb'), { gateway: { upstream: llm.baseURL } });
});
after(async () => {
  await agl.close();
  await llm.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);
const enqueue = async (questions: string[], resources?: object) => {
  const resources_id = resources
    ? (await agl.store.lightning.addResources(resources as never)).resources_id
    : undefined;
  return agl.store.lightning.enqueueManyRollouts(questions.map((question) => ({ input: { question }, resources_id })));
};
const idList = (rollouts: { rollout_id: string }[]) => rollouts.map((r) => `'${r.rollout_id}'`).join(',');

test('--exec: a shell script per rollout; exit code, reward line and its calls through the gateway are recorded', async () => {
  const queued = await enqueue(['one', 'bad', 'three']);
  const result = await runCli([
    'runner',
    '--exec',
    `sh ${join(APPS, 'exec-agent.sh')}`,
    '--store',
    agl.url,
    '--max-rollouts',
    '3',
    '--concurrency',
    '2',
  ]);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /ran 3 rollout\(s\)/);
  const statuses = await Promise.all(
    queued.map(async (r) => (await agl.store.lightning.getRolloutById(r.rollout_id))?.status),
  );
  assert.deepEqual(statuses, ['succeeded', 'failed', 'succeeded']);
  assert.deepEqual((await agl.store.lightning.getLatestAttempt(queued[1].rollout_id))?.metadata, {
    error: 'the command exited with 3: cannot answer bad',
  });
  const rewards = await rows(`SELECT value FROM rewards WHERE rollout_id IN (${idList(queued)})`);
  assert.deepEqual(
    rewards.map((r) => r.value),
    [0.5, 0.5],
  );
  // The gateway answers the script before its span is committed: the call may land a moment later.
  const calls = await eventually(
    agl.store,
    `SELECT rollout_id FROM llm_calls WHERE rollout_id IN (${idList(queued)})`,
    2,
  );
  assert.equal(calls.length, 2);
});

test('an agent module: default export of rollout(), recorded like agl/register', async () => {
  const llmResource = {
    llm: { resource_type: 'llm', endpoint: llm.baseURL, model: 'test-model', api_key: null, sampling_parameters: {} },
  };
  const queued = await enqueue(['red', 'green'], llmResource);
  const result = await runCli(['runner', join(APPS, 'echo-agent.mjs'), '--store', agl.url, '--max-rollouts', '2']);
  assert.equal(result.code, 0, result.stderr);
  const rewards = await rows(`SELECT value FROM rewards WHERE rollout_id IN (${idList(queued)})`);
  assert.deepEqual(
    rewards.map((r) => r.value),
    [1, 1],
  );
  // The agent's own capture and the gateway's describe one call: one row each.
  assert.equal((await rows(`SELECT * FROM llm_calls WHERE rollout_id IN (${idList(queued)})`)).length, 2);
});

test('a server with a token: the agent module calls the gateway with it, and it never goes upstream', async () => {
  const guarded = await startAgl(join(dir, 'token.duckdb'), { token: 'sekrit', gateway: { upstream: llm.baseURL } });
  try {
    const { resources_id } = await guarded.store.lightning.addResources({
      llm: { resource_type: 'llm', endpoint: llm.baseURL, model: 'test-model', api_key: null, sampling_parameters: {} },
    } as never);
    const [queued] = await guarded.store.lightning.enqueueManyRollouts([{ input: { question: 'blue' }, resources_id }]);
    const seen = llm.requests.length;
    const result = await runCli(
      ['runner', join(APPS, 'echo-agent.mjs'), '--store', guarded.url, '--max-rollouts', '1'],
      {
        env: { ...process.env, AGL_TOKEN: 'sekrit' },
      },
    );
    assert.equal(result.code, 0, result.stderr);
    const status = await queryRows(
      guarded.store,
      `SELECT status FROM rollouts WHERE rollout_id = '${queued.rollout_id}'`,
    );
    assert.deepEqual(status, [{ status: 'succeeded' }]);
    const upstream = llm.requests.slice(seen);
    assert.equal(upstream.length, 1);
    assert.ok(!String(upstream[0].headers.authorization ?? '').includes('sekrit'), upstream[0].headers.authorization);
  } finally {
    await guarded.close();
  }
});

test('usage errors', async () => {
  assert.equal((await runCli(['runner'])).code, 2);
  assert.match((await runCli(['runner', 'x.mjs', '--exec', 'true'])).stderr, /give an agent module or --exec/);
  assert.match((await runCli(['runner', '--exec', 'true', '--store', 'nope'])).stderr, /--store must be a URL/);
});
