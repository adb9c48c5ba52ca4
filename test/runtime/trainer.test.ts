import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { Baseline } from '../../src/algorithms/baseline.js';
import { rollout } from '../../src/runner/agent.js';
import { loadDataset } from '../../src/runtime/dataset.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir, until } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

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
  const { llm } = ctx;
  if (!llm) throw new Error('the rollout has no llm resource');
  const client = new OpenAI({ baseURL: llm.baseURL, apiKey: llm.apiKey });
  const answer = await client.chat.completions.create({
    model: llm.model,
    messages: [{ role: 'user', content: task.question }],
  });
  return answer.choices[0].message.content?.includes(task.question) ? 1 : 0;
});

test('fit with the Baseline: every task runs once, outcomes and rewards reported, everything stored', async () => {
  const db = join(dir, 'trainer.duckdb');
  const trainer = new Trainer({
    algorithm: new Baseline({
      resources: {
        llm: {
          resource_type: 'llm',
          endpoint: llm.baseURL,
          model: 'test-model',
          api_key: null,
          sampling_parameters: {},
        },
      },
    }),
    nRunners: 2,
    db,
  });
  const result = await trainer.fit(agent, {
    train: [{ question: 'a' }, { question: 'b' }, { question: 'c' }],
    val: [{ question: 'fail' }],
  });
  assert.deepEqual([result.total, result.succeeded, result.failed, result.meanReward], [4, 3, 1, 1]);
  assert.deepEqual(
    result.rollouts.map((r) => [r.mode, r.status, r.reward]),
    [
      ['train', 'succeeded', 1],
      ['train', 'succeeded', 1],
      ['train', 'succeeded', 1],
      ['val', 'failed', null],
    ],
  );

  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const { rows } = await store.query('SELECT count(*)::INTEGER AS n FROM llm_calls', { guard: false });
    assert.equal(rows[0].n, 3);
  } finally {
    await store.close();
  }
  assert.throws(
    () => new Trainer({ algorithm: new Baseline(), strategy: 'threads' as never }),
    /strategy must be "in-process" or "processes"/,
  );
});

test('in process with AGL_TOKEN: the server it starts requires the token', async (t) => {
  process.env.AGL_TOKEN = 'trainer-token';
  t.after(() => delete process.env.AGL_TOKEN);
  const statuses = await new Trainer({
    algorithm: {
      run: async ({ serverUrl }) => {
        const ask = (headers: Record<string, string>) =>
          fetch(`${serverUrl}/v1/agl/rollouts`, { headers }).then((answer) => answer.status);
        return [await ask({}), await ask({ authorization: 'Bearer trainer-token' })];
      },
    },
    db: join(dir, 'token.duckdb'),
  }).fit(agent, { train: [] });
  assert.deepEqual(statuses, [401, 200]);
});

test('dev: a few tasks with the Baseline, each rollout printed with its spans', async () => {
  const lines: string[] = [];
  const trainer = new Trainer({ algorithm: new Baseline(), db: join(dir, 'dev.duckdb') });
  const resources = {
    llm: {
      resource_type: 'llm' as const,
      endpoint: llm.baseURL,
      model: 'test-model',
      api_key: null,
      sampling_parameters: {},
    },
  };
  const result = await trainer.dev(
    rollout<{ question: string }>(async (task, ctx) => {
      if (!ctx.llm) throw new Error('the rollout has no llm resource');
      const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: 'k' });
      await client.chat.completions.create({
        model: 'test-model',
        messages: [{ role: 'user', content: task.question }],
      });
      return 0.5;
    }),
    [{ question: 'hi' }],
    { resources, print: (line) => lines.push(line) },
  );
  assert.equal(result.succeeded, 1);
  const text = lines.join('\n');
  assert.match(text, /^rollout ro-\S+: succeeded, reward 0.5/);
  assert.match(text, /chat test-model \d+ ms \(model test-model/);
  assert.match(text, /agentlightning\.annotation \d+ ms \(reward 0.5\)/);
});

test('processes: agl serve and runner processes started and stopped by the trainer, an openai agent, tasks from JSONL and Parquet', async () => {
  const tasks = join(dir, 'tasks.jsonl');
  await writeFile(tasks, [{ question: 'a' }, { question: 'b' }].map((t) => `${JSON.stringify(t)}\n`).join(''));
  const val = join(dir, 'val.parquet');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  await connection.run(`COPY (SELECT 'c' AS question) TO '${val}' (FORMAT parquet)`);
  connection.closeSync();
  instance.closeSync();
  const db = join(dir, 'processes.duckdb');
  const llmResource = {
    llm: {
      resource_type: 'llm' as const,
      endpoint: llm.baseURL,
      model: 'test-model',
      api_key: null,
      sampling_parameters: {},
    },
  };
  const trainer = new Trainer({
    algorithm: new Baseline({ resources: llmResource }),
    strategy: 'processes',
    nRunners: 2,
    db,
  });
  const result = await trainer.fit(join(APPS, 'echo-agent.mjs'), { train: tasks, val });
  assert.deepEqual([result.total, result.succeeded, result.meanReward], [3, 3, 1]);
  assert.deepEqual(
    result.rollouts.map((r) => [r.mode, r.reward]),
    [
      ['train', 1],
      ['train', 1],
      ['val', 1],
    ],
  );
  // Everything stopped: the file opens for writing, and holds the calls the runners made.
  const store = await DuckDBStore.open({ path: db });
  try {
    const { rows } = await store.query('SELECT count(*)::INTEGER AS n FROM llm_calls', { guard: false });
    assert.equal(rows[0].n, 3);
  } finally {
    await store.close();
  }
  await assert.rejects(
    trainer.fit(
      rollout(async () => 1),
      { train: [] },
    ),
    /give the path of its module/,
  );
  await assert.rejects(
    new Trainer({ algorithm: new Baseline(), db }).fit(
      rollout(async () => 1),
      { train: join(dir, 'nope.txt') },
    ),
    /ends in .jsonl, .ndjson, .json or .parquet/,
  );
});

test('datasets: arrays, JSON, JSONL and Parquet files; a bad file is named with what is wrong', async () => {
  const file = (name: string, text: string) => writeFile(join(dir, name), text).then(() => join(dir, name));
  assert.deepEqual(await loadDataset([{ a: 1 }]), [{ a: 1 }]);
  assert.deepEqual(await loadDataset(await file('t.json', '[{"a":1},{"a":2}]')), [{ a: 1 }, { a: 2 }]);
  assert.deepEqual(await loadDataset(await file('t.jsonl', '{"a":1}\n\n{"a":[2]}\n')), [{ a: 1 }, { a: [2] }]);
  await assert.rejects(loadDataset(await file('bad.jsonl', '{"a":1}\n{"a":\n')), /bad\.jsonl line 2 is not valid JSON/);
  await assert.rejects(loadDataset(await file('obj.json', '{"a":1}')), /holds no JSON array of tasks/);
});

test('processes: Ctrl-C stops the algorithm, the runners (killed after the grace period) and the server', async () => {
  const tasks = join(dir, 'slow.jsonl');
  await writeFile(tasks, `${JSON.stringify({ ms: 60_000 })}\n`);
  const db = join(dir, 'interrupted.duckdb');
  const child = spawn(
    process.execPath,
    [join(APPS, 'trainer-processes.mjs'), db, join(APPS, 'sleepy-agent.mjs'), tasks],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await until(async () => assert.match(output, /sleepy-agent: \{"ms":60000\}/), 30_000); // the rollout runs
  child.kill('SIGINT');
  assert.equal(await exited, 0, output);
  assert.match(output, /SIGINT: stopping the algorithm and the runners/);
  // The runner still in its 60 s rollout after the grace period was killed, not waited for.
  assert.doesNotMatch(output, /ran 1 rollout\(s\)/);
  assert.match(output, /done \{"total":0,"succeeded":0\}/);
  const store = await DuckDBStore.open({ path: db });
  await store.close();
});
