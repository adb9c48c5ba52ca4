import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { tableFromIPC } from 'apache-arrow';
import { CLI, fileRows, newTempDir, removeDir, runCli } from '../support/helpers.js';
import { assertCostAsSql } from '../support/run-cost.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from '../support/openai-server.js';

// `agl train grpo` as a process, on a port given with --port, and a trainer loop in this test
// that pulls each batch over HTTP with apache-arrow, checks it, and says done with a new model,
// which the gateway then routes the next rollouts to. The agent (apo-agent.mjs) earns 1 when the
// model's answer is the task's: q1's answer is the echo, q2's never comes.

const AGENT = join(APPS, 'apo-agent.mjs');
const TASKS = [
  { question: 'q1', answer: 'Echo: q1' },
  { question: 'q2', answer: 'never' },
];

let dir: string;
let base: OpenAITestServer;
let tuned: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  base = await startOpenAITestServer();
  tuned = await startOpenAITestServer();
  await writeFile(join(dir, 'train.jsonl'), TASKS.map((t) => JSON.stringify(t)).join('\n'));
  await writeFile(
    join(dir, 'run.yaml'),
    `algorithm: grpo
agent: ${AGENT}
train: train.jsonl
db: grpo.duckdb
runners: 2
resources:
  llm: { resource_type: llm, endpoint: "${base.baseURL}", model: base-model, sampling_parameters: { temperature: 0.8 } }
  prompt: { resource_type: prompt_template, template: "{question}", engine: f-string }
batchSize: 2
groupSize: 2
`,
  );
});
after(async () => {
  await base.close();
  await tuned.close();
  await removeDir(dir);
});

/** A port no one listens on now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test('agl train grpo: a trainer pulls batches over HTTP from the given port; its model serves the next step', async () => {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [CLI, 'train', 'grpo', '--config', 'run.yaml', '--port', String(port), '--steps', '2'],
    {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const url = `http://127.0.0.1:${port}`;
  // The run says where the batches are once its server serves.
  await new Promise<void>((resolve, reject) => {
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes(`pulls batches from ${url}/v1/agl/training/batches/next`)) resolve();
    });
    void exited.then(() => reject(new Error(`agl train grpo exited:\n${stderr}`)));
  });

  const models = ['0', '1'];
  for (const [i, version] of models.entries()) {
    const response = await fetch(`${url}/v1/agl/training/batches/next?wait=60`);
    assert.equal(response.status, 200);
    const table = tableFromIPC(new Uint8Array(await response.arrayBuffer()));
    const id = String(response.headers.get('agl-batch-id'));
    assert.deepEqual(Object.fromEntries(table.schema.metadata), {
      'agl.batch_id': id,
      'agl.step': String(i + 1),
      'agl.model_version': version,
      'agl.estimator': 'grpo',
      'agl.aggregation': 'transition',
      // The run's settings, for the trainer to check its own against; the temperature is the llm's.
      'agl.steps': '2',
      'agl.batch_size': '2',
      'agl.group_size': '2',
      'agl.temperature': '0.8',
    });
    const rows = table.toArray().map((row) => row.toJSON() as Record<string, unknown>);
    assert.equal(rows.length, 4);
    // Both groups have equal rewards (q1 always 1, q2 always 0): advantage 0.
    assert.deepEqual(
      rows.map((r) => [[...(r.prompt_ids as Iterable<number>)], r.model_version, r.reward, r.advantage]).sort(),
      [
        [testTokenIds('q1'), version, 1, 0],
        [testTokenIds('q1'), version, 1, 0],
        [testTokenIds('q2'), version, 0, 0],
        [testTokenIds('q2'), version, 0, 0],
      ].sort(),
    );
    const model = i === 0 ? { endpoint: tuned.baseURL, model: 'tuned-1', version: '1' } : undefined;
    const done = await fetch(`${url}/v1/agl/training/batches/${id}/done`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ metrics: { loss: 1 / (i + 1) }, model }),
    });
    assert.deepEqual(await done.json(), { batch_id: id, step: i + 1, model_version: '1' });
  }
  assert.equal(await exited, 0, stderr);
  assert.match(stdout, /^GRPO run ro-\w+: 2 steps trained\n/);
  assert.match(
    stdout,
    /\n1 +trained +0 +2 +4 +\d+ +0\.500 +0 +[\d.]+ +1\n2 +trained +1 +2 +4 +\d+ +0\.500 +0 +[\d.]+ +-\n/,
  );
  assert.match(stdout, new RegExp(`final model {2}tuned-1 at ${tuned.baseURL} \\(version 1, resources rs-`));
  assert.deepEqual(
    tuned.requests.map((r) => r.body.model),
    Array(4).fill('tuned-1'),
  );
  const steps = await fileRows(
    join(dir, 'grpo.duckdb'),
    'SELECT step, model_version, metrics FROM training_steps ORDER BY step',
  );
  assert.deepEqual(steps, [
    { step: 1, model_version: '0', metrics: { loss: 1 } },
    { step: 2, model_version: '1', metrics: { loss: 0.5 } },
  ]);
  // The cost is what SQL counts over the run's rollouts: 2 steps of 2 groups of 2.
  const runId = /^GRPO run (ro-\w+)/.exec(stdout)?.[1];
  const where = `(metadata->>'agl.grpo.run') = '${runId}'`;
  assert.equal(await assertCostAsSql(stdout, join(dir, 'grpo.duckdb'), where), 8);
});

test('agl train grpo: --processes needs the files hand-off; bad options are named', async () => {
  const processes = await runCli(['train', 'grpo', '--config', 'run.yaml', '--db', 'p.duckdb', '--processes'], {
    cwd: dir,
  });
  assert.equal(processes.code, 1);
  assert.match(processes.stderr, /^agl: this algorithm serves training batches from the Trainer's own server/);
  const bad = await runCli(['train', 'grpo', '--config', 'run.yaml', '--estimator', 'ppo', '--group-size', '0'], {
    cwd: dir,
  });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^agl: invalid grpo options: /);
  assert.match(bad.stderr, /--estimator must be one of grpo\|dr_grpo\|rloo\|none \(given "ppo"\)/);
  assert.match(bad.stderr, /--group-size must be an integer >= 1 \(given "0"\)/);
  assert.equal(bad.stderr.trim().split('\n').length, 1, bad.stderr);
});
