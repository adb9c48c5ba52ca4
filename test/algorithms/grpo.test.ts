import assert from 'node:assert/strict';
import { readdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { tableFromIPC } from 'apache-arrow';
import { DuckDBInstance } from '@duckdb/node-api';
import { GRPO, GrpoError } from '../../src/algorithms/grpo/index.js';
import type { GrpoOptionsInput } from '../../src/algorithms/grpo/options.js';
import { operation } from '../../src/instrumentation/emitters.js';
import { rollout } from '../../src/runner/agent.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { fileRows, newTempDir, removeDir, until } from '../support/helpers.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from '../support/openai-server.js';

// GRPO with the Trainer in process: the test server is the starting model, a second one the
// trained model, and the trainer a loop in this test that pulls batches over HTTP (Arrow) or reads
// them as Parquet files, checks them, and says done with a new model.

let dir: string;
let base: OpenAITestServer;
let tuned: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  base = await startOpenAITestServer();
  tuned = await startOpenAITestServer();
});
after(async () => {
  await base.close();
  await tuned.close();
  await removeDir(dir);
});

interface Task {
  question: string;
  /** The reward of the task's k-th rollout (counted over the whole file), round robin; default 1. */
  rewards?: number[];
  /** Its first N rollouts fail. */
  failFirst?: number;
  /** A planner call, then a solver call that continues the planner's conversation. */
  twoAgents?: boolean;
}

const tries = new Map<string, number>();
const agent = rollout<Task>(async (task, ctx) => {
  const k = tries.get(task.question) ?? 0;
  tries.set(task.question, k + 1);
  if (task.failFirst !== undefined && k < task.failFirst) throw new Error('flaky');
  if (!ctx.llm) throw new Error('the rollout has no llm resource');
  const { model } = ctx.llm;
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey, maxRetries: 0 });
  const ask = async (content: string) =>
    (await client.chat.completions.create({ model, messages: [{ role: 'user', content }] })).choices[0].message
      .content ?? '';
  if (task.twoAgents) {
    const plan = await operation('planner', ask)(`${task.question} `);
    await operation('solver', ask)(`${task.question} ${plan}solve`);
  } else await ask(task.question);
  return task.rewards ? task.rewards[k % task.rewards.length] : 1;
});

/** A GRPO run in process; resolves to the run and, once the run said it, the batches' URL. */
function start(name: string, tasks: Task[], options: Partial<GrpoOptionsInput>) {
  const db = join(dir, `${name}.duckdb`);
  const lines: string[] = [];
  let announced: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => (announced = resolve));
  const algorithm = new GRPO<Task>({
    llm: { endpoint: base.baseURL, model: 'base' },
    batchSize: 2,
    groupSize: 2,
    steps: 1,
    ...options,
    log: (line) => {
      lines.push(line);
      const match = /pulls batches from (\S+)\/v1\/agl/.exec(line);
      if (match) announced(match[1]);
    },
  });
  const run = new Trainer({ algorithm, db }).fit(agent, { train: tasks });
  return { db, run, url, lines };
}

/** The trainer's pull: the next batch, as Arrow, with its headers. */
async function pull(url: string) {
  const response = await fetch(`${url}/v1/agl/training/batches/next?wait=60`);
  assert.equal(response.status, 200, await response.clone().text());
  const table = tableFromIPC(new Uint8Array(await response.arrayBuffer()));
  return {
    id: String(response.headers.get('agl-batch-id')),
    step: Number(response.headers.get('agl-step')),
    version: String(response.headers.get('agl-model-version')),
    table,
    rows: table.toArray().map((row) => row.toJSON() as Record<string, unknown>),
  };
}

async function finish(url: string, id: string, body: unknown) {
  const response = await fetch(`${url}/v1/agl/training/batches/${id}/done`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return response.json();
}

const list = (value: unknown) => [...(value as Iterable<number>)];

/** Rows of a query over Parquet files, in an in-memory DuckDB (what a trainer's reader sees). */
async function parquetRows(sql: string): Promise<Record<string, unknown>[]> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    return (await connection.runAndReadAll(sql)).getRowObjectsJson() as Record<string, unknown>[];
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
const EPS = 1e-6;

test('two on-policy steps over HTTP: exact advantages; the trainer’s model serves the next step', async () => {
  const tasks = [
    { question: 'alpha', rewards: [1, 0] }, // a group of 1 and 0
    { question: 'beta', rewards: [0.5] }, // equal rewards: advantage 0
  ];
  const { db, run, url } = start('http', tasks, { steps: 2 });
  const server = await url;

  const first = await pull(server);
  assert.deepEqual([first.step, first.version], [1, '0']);
  assert.equal(first.table.numRows, 4);
  assert.equal(new Set(first.rows.map((r) => r.group_id)).size, 2);
  const a = 0.5 / (Math.sqrt(0.5) + EPS); // group {1, 0}: mean 0.5, sample std sqrt(0.5)
  for (const row of first.rows) {
    const question = row.reward === 0.5 ? 'beta' : 'alpha';
    assert.deepEqual(list(row.prompt_ids), testTokenIds(question));
    assert.deepEqual(list(row.response_ids), testTokenIds(`Echo: ${question}`));
    assert.deepEqual(list(row.response_mask), [1, 1]);
    assert.deepEqual(list(row.response_logprobs), [-0.5, -0.5]);
    assert.equal(row.model_version, '0');
    assert.equal(row.batch_id, first.id);
    const expected = row.reward === 1 ? a : row.reward === 0 ? -a : 0;
    assert.ok(Math.abs(Number(row.advantage) - expected) < 1e-5, `${row.reward}: ${row.advantage}`);
  }
  assert.deepEqual(
    await finish(server, first.id, {
      metrics: { loss: 0.25 },
      model: { endpoint: tuned.baseURL, model: 'tuned-1', version: '1' },
    }),
    { batch_id: first.id, step: 1, model_version: '1' },
  );

  const second = await pull(server);
  assert.deepEqual([second.step, second.version], [2, '1']);
  assert.ok(second.rows.every((r) => r.model_version === '1'));
  await finish(server, second.id, {});
  const result = await run;

  // Step 1 ran on the starting model, step 2 on the trainer's, through the gateway.
  assert.deepEqual(
    base.requests.slice(-4).map((r) => [r.body.model, r.body.return_token_ids, r.body.logprobs]),
    Array(4).fill(['base', true, true]),
  );
  assert.deepEqual(
    tuned.requests.map((r) => r.body.model),
    Array(4).fill('tuned-1'),
  );
  assert.deepEqual([result.modelVersion, result.model, result.endpoint], ['1', 'tuned-1', tuned.baseURL]);
  assert.deepEqual(
    result.steps.map((s) => [s.step, s.status, s.modelVersion, s.nextModelVersion]),
    [
      [1, 'trained', '0', '1'],
      [2, 'trained', '1', undefined],
    ],
  );
  const steps = await fileRows(db, 'SELECT * FROM training_steps ORDER BY step');
  assert.deepEqual(
    steps.map((s) => [
      s.run_id,
      s.step,
      s.status,
      s.batch_id,
      s.model_version,
      s.next_model_version,
      s.groups,
      s.rows,
      s.rollouts,
      s.kept_rollouts,
      s.zero_variance_groups,
      s.dropped_failed,
    ]),
    [
      [result.runId, 1, 'trained', first.id, '0', '1', 2, 4, 4, 4, 1, 0],
      [result.runId, 2, 'trained', second.id, '1', null, 2, 4, 4, 4, 1, 0],
    ],
  );
  assert.deepEqual(
    [steps[0].reward_mean, steps[0].reward_min, steps[0].reward_max, steps[0].tokens, steps[0].trained_tokens],
    [0.5, 0, 1, 4 * 3, 4 * 2],
  );
  assert.deepEqual(steps[0].metrics, { loss: 0.25 });
  assert.ok(Number(steps[0].trainer_seconds) > 0 && Number(steps[0].rollout_seconds) > 0);
  // Each model version is a resources version whose llm carries it; each rollout names its own.
  const versions = await fileRows(
    db,
    `SELECT r.metadata->>'agl.grpo.step' AS step, s.resources->'llm'->>'model_version' AS version, count(*)::INTEGER AS n
     FROM rollouts r JOIN resources s USING (resources_id) WHERE r.mode = 'train' GROUP BY ALL ORDER BY step`,
  );
  assert.deepEqual(versions, [
    { step: '1', version: '0', n: 4 },
    { step: '2', version: '1', n: 4 },
  ]);
});

test('pipelined (maxStaleness 1): the next step runs while the trainer holds a batch', async () => {
  const { run, url } = start('pipelined', [{ question: 'gamma', rewards: [1, 0] }], {
    steps: 2,
    batchSize: 1,
    maxStaleness: 1,
  });
  const server = await url;
  const first = await pull(server);
  // Batch 1 is with the trainer, not done: batch 2 comes anyway, from the same model version.
  const second = await pull(server);
  assert.deepEqual([first.step, second.step, first.version, second.version], [1, 2, '0', '0']);
  await finish(server, first.id, { model: { endpoint: tuned.baseURL, model: 'tuned-p1' } });
  assert.deepEqual(await finish(server, second.id, { model: { endpoint: tuned.baseURL, model: 'tuned-p2' } }), {
    batch_id: second.id,
    step: 2,
    model_version: '2',
  });
  const result = await run;
  assert.deepEqual(
    result.steps.map((s) => [s.step, s.modelVersion, s.nextModelVersion, s.dropped.stale]),
    [
      [1, '0', '1', 0],
      [2, '0', '2', 0],
    ],
  );
  assert.equal(result.model, 'tuned-p2');
});

test('too few usable groups: the step runs more tasks rather than a thin batch, or fails saying why', async () => {
  const tasks = [{ question: 'good' }, { question: 'flaky', failFirst: 2 }];
  const { run, url, db } = start('top-up', tasks, { minGroups: 2 });
  const batch = await pull(await url);
  assert.equal(new Set(batch.rows.map((r) => r.group_id)).size, 2);
  assert.equal(batch.table.numRows, 4);
  await finish(await url, batch.id, {});
  await run;
  const [step] = await fileRows(
    db,
    'SELECT rollouts, kept_rollouts, groups, top_ups, dropped_failed FROM training_steps',
  );
  assert.deepEqual(step, { rollouts: 6, kept_rollouts: 4, groups: 2, top_ups: 1, dropped_failed: 2 });

  const failing = start('no-top-up', [{ question: 'good2' }, { question: 'flaky2', failFirst: 2 }], {
    minGroups: 2,
    maxTopUps: 0,
  });
  const error = await failing.run.then(
    () => assert.fail('the run should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof GrpoError);
  assert.match(
    error.message,
    /^step 1: only 1 usable group\(s\) of the 2 needed after 0 extra round\(s\) of tasks \(left out: 2 failed\)$/,
  );
  const [failed] = await fileRows(failing.db, 'SELECT status, error FROM training_steps');
  assert.deepEqual(failed, { status: 'failed', error: error.message });
});

test('two agents, trajectory rows: only the solver is trained, the planner stays as masked context', async () => {
  const { run, url } = start('agents', [{ question: 'q', twoAgents: true }], {
    batchSize: 1,
    aggregation: 'trajectory',
    agentMatch: '^solver$',
  });
  const batch = await pull(await url);
  await finish(await url, batch.id, {});
  await run;
  const plan = testTokenIds('Echo: q ');
  const answer = testTokenIds('Echo: q Echo: q solve');
  for (const row of batch.rows) {
    assert.deepEqual(list(row.prompt_ids), testTokenIds('q '));
    assert.deepEqual(list(row.response_ids), [...plan, ...testTokenIds('solve'), ...answer]);
    assert.deepEqual(list(row.response_mask), [0, 0, 0, 1, 1, 1, 1, 1]);
    assert.deepEqual(list(row.response_logprobs), [0, 0, 0, -0.5, -0.5, -0.5, -0.5, -0.5]);
  }
  assert.equal(batch.rows.length, 2);
  // Transition rows of the same rollouts: the solver's call alone.
  const transition = start('agents-transition', [{ question: 'r', twoAgents: true }], {
    batchSize: 1,
    agentMatch: '^solver$',
  });
  const rows = (await pull(await transition.url)).rows;
  assert.deepEqual(
    rows.map((r) => [list(r.prompt_ids), list(r.response_ids)]),
    Array(2).fill([testTokenIds('r Echo: r solve'), testTokenIds('Echo: r Echo: r solve')]),
  );
  await finish(await transition.url, String(rows[0].batch_id), {});
  await transition.run;
});

test('files: each batch a Parquet file (renamed into place), each done a JSON file beside it', async () => {
  const batchesDir = join(dir, 'batches');
  const { run } = start('files', [{ question: 'delta', rewards: [1, 0] }], {
    steps: 2,
    batchSize: 1,
    batchesDir,
    estimator: 'rloo',
  });
  const files = async () => (await readdir(batchesDir).catch(() => [])).sort();
  const parquetOf = async (step: number) => {
    let found: string | undefined;
    await until(async () => {
      found = (await files()).find((f) => f.startsWith(`batch-00000${step}-`) && f.endsWith('.parquet'));
      assert.ok(found, 'no batch file yet');
    }, 30_000);
    return join(batchesDir, String(found));
  };
  const writeDone = async (parquet: string, body: unknown) => {
    const path = parquet.replace(/\.parquet$/, '.done.json');
    await writeFile(`${path}.tmp`, JSON.stringify(body));
    await rename(`${path}.tmp`, path);
  };

  const first = await parquetOf(1);
  const kv = Object.fromEntries(
    (
      await parquetRows(
        `SELECT decode(key) AS key, decode(value) AS value FROM parquet_kv_metadata('${first}') WHERE decode(key) LIKE 'agl.%'`,
      )
    ).map(({ key, value }) => [key, value]),
  );
  assert.deepEqual(kv, {
    'agl.batch_id': kv['agl.batch_id'],
    'agl.step': '1',
    'agl.model_version': '0',
    'agl.estimator': 'rloo',
    'agl.aggregation': 'transition',
    // The run's settings a trainer checks its own against; no agl.temperature: the llm sets none.
    'agl.steps': '2',
    'agl.batch_size': '1',
    'agl.group_size': '2',
  });
  assert.equal(first, join(batchesDir, `batch-000001-${kv['agl.batch_id']}.parquet`));
  const columns = await parquetRows(`DESCRIBE SELECT * FROM '${first}'`);
  assert.deepEqual(
    columns.map((c) => `${c.column_name} ${c.column_type}`),
    [
      'batch_id VARCHAR',
      'step INTEGER',
      'group_id VARCHAR',
      'rollout_id VARCHAR',
      'attempt_id VARCHAR',
      'model_version VARCHAR',
      'prompt_ids INTEGER[]',
      'response_ids INTEGER[]',
      'response_mask TINYINT[]',
      'response_logprobs FLOAT[]',
      'reward FLOAT',
      'advantage FLOAT',
    ],
  );
  const rows = await parquetRows(`SELECT reward, advantage FROM '${first}' ORDER BY reward`);
  // rloo on {0, 1}: each minus the other.
  assert.deepEqual(rows, [
    { reward: 0, advantage: -1 },
    { reward: 1, advantage: 1 },
  ]);
  await writeDone(first, { metrics: { loss: 1 }, model: { endpoint: tuned.baseURL, model: 'tuned-f', version: 'f1' } });
  const second = await parquetOf(2);
  await writeDone(second, {});
  const result = await run;
  assert.deepEqual(
    result.steps.map((s) => [s.step, s.modelVersion, s.nextModelVersion]),
    [
      [1, '0', 'f1'],
      [2, 'f1', undefined],
    ],
  );
  assert.ok(
    (await files()).every((f) => !f.startsWith('.')),
    'no temp file is left',
  );
});
