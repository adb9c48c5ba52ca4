import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { DuckDBInstance } from '@duckdb/node-api';
import type { LightningStore } from '../../src/api/lightning-store.js';
import { SFT, SftError } from '../../src/algorithms/sft/index.js';
import { parseSftOptions } from '../../src/algorithms/sft/options.js';
import { selectSamples, type Sample } from '../../src/algorithms/sft/select.js';
import {
  fillPlaceholders,
  runCommand,
  shellQuote,
  type PlaceholderValues,
} from '../../src/algorithms/sft/training-process.js';
import { rollout } from '../../src/runner/agent.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { DuckDBStore } from '../../src/store/store.js';
import { fileRows, json, newTempDir, removeDir, until } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from '../support/openai-server.js';

// SFT with the Trainer in-process: the test server is the starting model, a second one the
// "trained" model, and the training command a small node script that stands in for the trainer.

let dir: string;
let base: OpenAITestServer;
let tuned: OpenAITestServer;
let trainScript: string;

// The stand-in trainer: node train.mjs DATASET OUTPUT ITERATION MODEL. It reads the dataset,
// writes a file into OUTPUT, and prints where the trained model is served (unless NO_MARKERS);
// FAIL_AT=N fails iteration N; WAIT=1 starts a child and waits to be killed.
const TRAIN_SCRIPT = `
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
const [dataset, output, iteration, model] = process.argv.slice(2);
const records = readFileSync(dataset).length > 0 && dataset.endsWith('.jsonl') ? readFileSync(dataset, 'utf8').trim().split('\\n').length : 0;
mkdirSync(output, { recursive: true });
writeFileSync(join(output, 'trained.json'), JSON.stringify({ records, base: model, env: process.env.AGL_SFT_DATASET === dataset }));
console.log('training on ' + records + ' record(s) from ' + model);
console.error('epoch 1 loss 0.5');
if (process.env.FAIL_AT === iteration) {
  console.log('loss exploded');
  process.exit(3);
}
if (process.env.WAIT) {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  writeFileSync(join(output, 'pids.json'), JSON.stringify([process.pid, child.pid]));
  console.log('training started');
  setInterval(() => {}, 1000);
} else if (!process.env.NO_MARKERS) {
  console.log('AGL_MODEL_ENDPOINT=' + process.env.TUNED_URL);
  console.log('AGL_MODEL_NAME=tuned-' + iteration);
}
`;

before(async () => {
  dir = await newTempDir();
  base = await startOpenAITestServer();
  tuned = await startOpenAITestServer();
  trainScript = join(dir, 'train.mjs');
  await writeFile(trainScript, TRAIN_SCRIPT);
});
after(async () => {
  await base.close();
  await tuned.close();
  await removeDir(dir);
});

/** The training command: env assignments, then the stand-in trainer with its placeholders. */
const trainCmd = (env = '') =>
  `${env} TUNED_URL=${shellQuote(tuned.baseURL)} ${shellQuote(process.execPath)} ${shellQuote(trainScript)} {dataset} {output} {iteration} {model}`;

interface Task {
  question: string;
  /** The reward of the task's k-th rollout (k counted over the whole test file), round robin. */
  rewards: number[];
}

// Each rollout of a task with several rewards asks "<question> #k": its transcript says which
// rollout it was, so the test knows exactly which records selection must keep.
const tries = new Map<string, number>();
const agent = rollout<Task>(async (task, ctx) => {
  const k = tries.get(task.question) ?? 0;
  tries.set(task.question, k + 1);
  const text = task.rewards.length > 1 ? `${task.question} #${k}` : task.question;
  const { llm } = ctx;
  if (!llm) throw new Error('the rollout has no llm resource');
  const client = new OpenAI({ baseURL: llm.baseURL, apiKey: llm.apiKey });
  await client.chat.completions.create({
    model: llm.model,
    messages: [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: text },
    ],
  });
  return task.rewards[k % task.rewards.length];
});

const chat = (text: string) => ({
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: text },
    { role: 'assistant', content: `Echo: ${text}` },
  ],
});
const jsonl = async (path: string) =>
  (await readFile(path, 'utf8'))
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
const sorted = (records: unknown[]) => records.map((r) => JSON.stringify(r)).sort();

test('two iterations: datasets hold exactly the selected records, versions advance, the next rollouts use the trained model', async () => {
  const db = join(dir, 'sft.duckdb');
  const outDir = join(dir, 'run');
  const tasks: Task[] = [
    { question: 'alpha', rewards: [0.1, 0.9, 0.5, 0.3] }, // top half: #1 (0.9) and #2 (0.5), both over the threshold
    { question: 'beta', rewards: [0.2, 0.2, 0.2, 0.2] }, // under the threshold: none
    { question: 'gamma', rewards: [1] }, // four identical transcripts: one record
  ];
  const algorithm = new SFT<Task>({
    trainCmd: trainCmd(),
    iterations: 2,
    samplesPerTask: 4,
    topFraction: 0.5,
    threshold: 0.4,
    outDir,
    llm: { endpoint: base.baseURL, model: 'base-model' },
    quiet: true,
  });
  const result = await new Trainer({ algorithm, db }).fit(agent, { train: tasks });

  assert.deepEqual(
    result.iterations.map((i) => [i.iteration, i.status, i.rollouts, i.records, i.duplicates, i.exitCode]),
    [
      [1, 'trained', 12, 3, 1, 0],
      [2, 'trained', 12, 3, 1, 0],
    ],
  );
  const first = join(outDir, 'iteration-1', 'dataset.jsonl');
  const second = join(outDir, 'iteration-2', 'dataset.jsonl');
  assert.deepEqual(sorted(await jsonl(first)), sorted([chat('alpha #1'), chat('alpha #2'), chat('gamma')]));
  assert.deepEqual(sorted(await jsonl(second)), sorted([chat('alpha #5'), chat('alpha #6'), chat('gamma')]));
  // The command got the dataset, the output folder and the model, quoted, and in the environment.
  assert.deepEqual(JSON.parse(await readFile(join(outDir, 'iteration-1', 'model', 'trained.json'), 'utf8')), {
    records: 3,
    base: 'base-model',
    env: true,
  });
  assert.deepEqual(JSON.parse(await readFile(join(outDir, 'iteration-2', 'model', 'trained.json'), 'utf8')), {
    records: 3,
    base: 'tuned-1',
    env: true,
  });
  // stdout and stderr are two pipes: their lines come in either order.
  const log = await readFile(join(outDir, 'iteration-1', 'train.log'), 'utf8');
  for (const line of ['training on 3 record(s) from base-model', 'epoch 1 loss 0.5', 'AGL_MODEL_NAME=tuned-1'])
    assert.ok(log.includes(`${line}\n`), log);

  // Iteration 1 ran on the starting model, iteration 2 on the model iteration 1 published.
  assert.deepEqual(new Set(base.requests.map((r) => r.body.model)), new Set(['base-model']));
  assert.equal(base.requests.length, 12);
  assert.deepEqual(new Set(tuned.requests.map((r) => r.body.model)), new Set(['tuned-1']));
  assert.equal(tuned.requests.length, 12);
  assert.deepEqual([result.model, result.endpoint], ['tuned-2', tuned.baseURL]);

  const versions = await fileRows(
    db,
    `SELECT resources_id, resources->'llm'->>'model' AS model FROM resources ORDER BY create_time`,
  );
  assert.deepEqual(
    versions.map((v) => v.model),
    ['base-model', 'tuned-1', 'tuned-2'],
  );
  assert.equal(result.resourcesId, versions[2].resources_id);
  const used = await fileRows(
    db,
    `SELECT DISTINCT metadata->>'agl.sft.iteration' AS iteration, resources_id FROM rollouts WHERE mode = 'train' ORDER BY iteration`,
  );
  assert.deepEqual(
    used.map((r) => [r.iteration, r.resources_id]),
    [
      ['1', versions[0].resources_id],
      ['2', versions[1].resources_id],
    ],
  );

  const rows = await fileRows(db, 'SELECT * FROM sft_iterations ORDER BY iteration');
  assert.deepEqual(
    rows.map((r) => [
      r.run_id,
      r.iteration,
      r.status,
      r.records,
      r.dataset,
      r.exit_code,
      r.used_resources_id,
      r.resources_id,
      r.model,
      r.endpoint,
    ]),
    [
      [
        result.runId,
        1,
        'trained',
        3,
        first,
        0,
        versions[0].resources_id,
        versions[1].resources_id,
        'tuned-1',
        tuned.baseURL,
      ],
      [
        result.runId,
        2,
        'trained',
        3,
        second,
        0,
        versions[1].resources_id,
        versions[2].resources_id,
        'tuned-2',
        tuned.baseURL,
      ],
    ],
  );
  assert.match(
    String(rows[0].command),
    /train\.mjs' '.*iteration-1\/dataset\.jsonl' '.*iteration-1\/model' '1' 'base-model'$/,
  );
  assert.deepEqual(String(rows[0].output_tail).split('\n').sort(), log.trim().split('\n').sort());
  assert.equal((json(rows[0].kept_rollout_ids) as string[]).length, 4);
  assert.deepEqual([rows[0].kept_rollouts, rows[0].duplicates], [4, 1]);
  assert.ok(Math.abs(Number(rows[0].mean_reward) - 6.6 / 12) < 1e-9, String(rows[0].mean_reward));
  // The run is a rollout of its own, as every algorithm's (algorithm-run.ts), from the first version.
  const [run] = await fileRows(
    db,
    `SELECT status, mode, metadata->>'agl_algorithm' AS algorithm, resources_id FROM rollouts WHERE rollout_id = '${result.runId}'`,
  );
  assert.deepEqual(run, { status: 'succeeded', mode: null, algorithm: 'sft', resources_id: versions[0].resources_id });
  const spans = await fileRows(
    db,
    `SELECT count(*)::INTEGER AS n, bool_and(end_time > start_time) AS timed FROM spans WHERE rollout_id = '${result.runId}'`,
  );
  assert.deepEqual(spans, [{ n: 2, timed: true }]);
});

test('a failing training command stops the loop with its output; datasets and versions so far are kept', async () => {
  const db = join(dir, 'failing.duckdb');
  const outDir = join(dir, 'failing');
  const algorithm = new SFT<Task>({
    trainCmd: trainCmd('FAIL_AT=2'),
    iterations: 3,
    samplesPerTask: 1,
    outDir,
    llm: { endpoint: base.baseURL, model: 'base-model' },
    quiet: true,
  });
  const error = await new Trainer({ algorithm, db }).fit(agent, { train: [{ question: 'delta', rewards: [1] }] }).then(
    () => assert.fail('the run should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof SftError);
  assert.match(
    error.message,
    /^SFT iteration 2: the training command exited with code 3 \(dataset kept: .*iteration-2\/dataset\.jsonl\)/,
  );
  assert.match(error.message, /\(all of it: .*iteration-2\/train\.log\) ---\n/);
  for (const line of ['training on 1 record(s) from tuned-1', 'epoch 1 loss 0.5', 'loss exploded'])
    assert.ok(error.message.includes(`\n${line}`), error.message);
  assert.equal(error.iteration.exitCode, 3);
  assert.deepEqual(await jsonl(join(outDir, 'iteration-2', 'dataset.jsonl')), [chat('delta')]);
  assert.ok(!existsSync(join(outDir, 'iteration-3')));

  const versions = await fileRows(db, `SELECT resources->'llm'->>'model' AS model FROM resources ORDER BY create_time`);
  assert.deepEqual(
    versions.map((v) => v.model),
    ['base-model', 'tuned-1'],
  );
  const rows = await fileRows(
    db,
    'SELECT iteration, status, exit_code, error, output_tail, resources_id FROM sft_iterations ORDER BY iteration',
  );
  assert.deepEqual(
    rows.map((r) => [r.iteration, r.status, r.exit_code, r.resources_id === null]),
    [
      [1, 'trained', 0, false],
      [2, 'failed', 3, true],
    ],
  );
  assert.equal(rows[1].error, 'the training command exited with code 3');
  const statuses = await fileRows(
    db,
    `SELECT status_code, status_message FROM spans WHERE name = 'agl.sft.iteration' ORDER BY sequence_id`,
  );
  assert.deepEqual(statuses, [
    { status_code: 'OK', status_message: null },
    { status_code: 'ERROR', status_message: 'the training command exited with code 3' },
  ]);
  assert.ok(String(rows[1].output_tail).split('\n').includes('loss exploded'), String(rows[1].output_tail));
  const [run] = await fileRows(
    db,
    `SELECT r.status FROM rollouts r JOIN sft_iterations s ON s.run_id = r.rollout_id LIMIT 1`,
  );
  assert.equal(run.status, 'failed');
});

test('parquet: token-level rows from the token ids the gateway asked for; the templates name the model', async () => {
  const db = join(dir, 'parquet.duckdb');
  const outDir = join(dir, 'parquet');
  const algorithm = new SFT<Task>({
    trainCmd: trainCmd('NO_MARKERS=1'),
    iterations: 1,
    samplesPerTask: 2,
    topFraction: 1,
    format: 'parquet',
    outDir,
    llm: { endpoint: base.baseURL, model: 'base-model', samplingParameters: { temperature: 0 } },
    modelTemplate: 'sft-{iteration}',
    quiet: true,
  });
  const result = await new Trainer({ algorithm, db }).fit(agent, {
    train: [
      { question: 'epsilon', rewards: [0.7] },
      { question: 'zeta', rewards: [0.2, 0.4] },
    ],
  });
  // epsilon twice, the same tokens: one row; zeta #0 and #1 differ: two.
  assert.deepEqual(
    result.iterations.map((i) => [i.records, i.duplicates]),
    [[3, 1]],
  );
  assert.deepEqual([result.model, result.endpoint], ['sft-1', base.baseURL]);
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const reader = await connection.runAndReadAll(
      `SELECT group_key, prompt_ids, response_ids, response_mask, reward FROM '${join(outDir, 'iteration-1', 'dataset.parquet')}'`,
    );
    const rows = reader.getRowObjectsJson();
    const expected = (text: string, task: number, reward: number) => ({
      group_key: `task-${task}`,
      prompt_ids: testTokenIds(`Be brief.\n${text}`),
      response_ids: testTokenIds(`Echo: ${text}`),
      response_mask: testTokenIds(`Echo: ${text}`).map(() => 1),
      reward,
    });
    assert.deepEqual(
      sorted(rows),
      sorted([expected('epsilon', 0, 0.7), expected('zeta #0', 1, 0.2), expected('zeta #1', 1, 0.4)]),
    );
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
  // The gateway added the sampling parameters, token ids asked for, to every call.
  assert.ok(base.requests.slice(-4).every((r) => r.body.return_token_ids === true && r.body.temperature === 0));
});

test('Ctrl-C during training: the command and what it started are killed, the run ends cleanly and is recorded', async () => {
  const db = join(dir, 'interrupted.duckdb');
  const outDir = join(dir, 'interrupted');
  const options = {
    trainCmd: trainCmd('WAIT=1'),
    iterations: 2,
    samplesPerTask: 1,
    outDir,
    llm: { endpoint: base.baseURL, model: 'base-model' },
    killGraceSeconds: 5,
  };
  const child = spawn(
    process.execPath,
    [join(APPS, 'sft-trainer.mjs'), db, JSON.stringify(options), JSON.stringify([{ question: 'eta' }])],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = new Promise<void>((resolve) => {
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('| training started')) resolve();
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
  });
  await Promise.race([started, exited]);
  child.kill('SIGINT');
  assert.equal(await exited, 0, output);
  assert.match(output, /done \{"stopped":true,"statuses":\["stopped"\]\}/);
  // The iteration the signal cut short counts: its rollout ran, with its call and tokens.
  const cost = JSON.parse(/\ncost (\{.*\})\n/.exec(output)?.[1] ?? '{}');
  const [spent] = await fileRows(
    db,
    `SELECT count(DISTINCT r.rollout_id)::INTEGER AS rollouts, count(c.span_id)::INTEGER AS calls,
       sum(c.input_tokens + c.output_tokens)::INTEGER AS tokens
     FROM rollouts r LEFT JOIN llm_calls c USING (rollout_id) WHERE (r.metadata->>'agl.sft.run') IS NOT NULL`,
  );
  assert.deepEqual([cost.rollouts, cost.calls, cost.tokens], [spent.rollouts, spent.calls, spent.tokens]);
  assert.equal(spent.rollouts, 1);
  const pids = JSON.parse(await readFile(join(outDir, 'iteration-1', 'model', 'pids.json'), 'utf8')) as number[];
  await until(async () => {
    for (const pid of pids) assert.throws(() => process.kill(pid, 0), /ESRCH/);
  }, 10_000);
  const rows = await fileRows(db, 'SELECT iteration, status, error, output_tail, exit_signal FROM sft_iterations');
  assert.deepEqual(
    rows.map((r) => [r.iteration, r.status, r.error, r.exit_signal]),
    [[1, 'stopped', 'stopped by the signal', 'SIGTERM']],
  );
  assert.ok(String(rows[0].output_tail).split('\n').includes('training started'), String(rows[0].output_tail));
  assert.deepEqual(await jsonl(join(outDir, 'iteration-1', 'dataset.jsonl')), [
    {
      messages: [
        { role: 'user', content: 'eta' },
        { role: 'assistant', content: 'Echo: eta' },
      ],
    },
  ]);
  const [run] = await fileRows(db, `SELECT status FROM rollouts WHERE mode IS NULL`);
  assert.equal(run.status, 'cancelled');
});

test('validation tasks: scored each iteration and once more with the last model; the starting model from the store', async () => {
  const db = join(dir, 'val.duckdb');
  const store = await DuckDBStore.open({ path: db });
  const prompt = { resource_type: 'prompt_template' as const, template: 'Q: {question}', engine: 'f-string' as const };
  const llm = {
    resource_type: 'llm' as const,
    endpoint: base.baseURL,
    model: 'stored-model',
    api_key: null,
    sampling_parameters: {},
  };
  const seeded = await store.lightning.addResources({ llm, prompt });
  await store.close();
  const algorithm = new SFT<Task>({
    trainCmd: trainCmd(),
    iterations: 1,
    samplesPerTask: 1,
    outDir: join(dir, 'val'),
    quiet: true,
  });
  const result = await new Trainer({ algorithm, db }).fit(agent, {
    train: [{ question: 'theta', rewards: [1] }],
    val: [{ question: 'iota', rewards: [0.25, 0.75] }],
  });
  assert.deepEqual(
    result.iterations.map((i) => [
      i.iteration,
      i.status,
      i.usedResourcesId === seeded.resources_id,
      i.rollouts,
      i.meanReward,
      i.valMeanReward,
    ]),
    [
      [1, 'trained', true, 2, 1, 0.25],
      [2, 'evaluated', false, 1, null, 0.75],
    ],
  );
  assert.equal(result.finalValMeanReward, 0.75);
  assert.deepEqual(tuned.requests.at(-1)?.body.messages?.[1], { role: 'user', content: 'iota #1' });
  // The published version keeps the other resources.
  const [latest] = await fileRows(db, 'SELECT resources FROM resources ORDER BY create_time DESC LIMIT 1');
  assert.deepEqual(json(latest.resources), { llm: { ...llm, endpoint: tuned.baseURL, model: 'tuned-1' }, prompt });
  const rows = await fileRows(
    db,
    'SELECT iteration, status, val_mean_reward, dataset FROM sft_iterations ORDER BY iteration',
  );
  assert.deepEqual(rows, [
    {
      iteration: 1,
      status: 'trained',
      val_mean_reward: 0.25,
      dataset: join(dir, 'val', 'iteration-1', 'dataset.jsonl'),
    },
    { iteration: 2, status: 'evaluated', val_mean_reward: 0.75, dataset: null },
  ]);
});

test('an iteration that keeps nothing stops the loop before training, and says why', async () => {
  const db = join(dir, 'empty.duckdb');
  const algorithm = new SFT<Task>({
    trainCmd: trainCmd(),
    samplesPerTask: 2,
    threshold: 0.5,
    outDir: join(dir, 'empty'),
    llm: { endpoint: base.baseURL, model: 'base-model' },
    quiet: true,
  });
  await assert.rejects(new Trainer({ algorithm, db }).fit(agent, { train: [{ question: 'kappa', rewards: [0.1] }] }), {
    name: 'SftError',
    message: 'SFT iteration 1: no training records: 0 of 2 rollout(s) kept',
  });
  const rows = await fileRows(db, 'SELECT status, rollouts, kept_rollouts, command FROM sft_iterations');
  assert.deepEqual(rows, [{ status: 'no_records', rollouts: 2, kept_rollouts: 0, command: null }]);
  assert.ok(!existsSync(join(dir, 'empty', 'iteration-1')));
});

test('selection: top fraction per task (ties to the earlier sample), threshold, failed and unrewarded rollouts left out', () => {
  const sample = (
    rolloutId: string,
    task: number,
    reward: number | null,
    status: Sample['status'] = 'succeeded',
  ): Sample => ({ rolloutId, task, reward, status, calls: [] });
  const samples = [
    sample('a0', 0, 0.5),
    sample('a1', 0, 0.9),
    sample('a2', 0, 0.5),
    sample('a3', 0, 1, 'failed'),
    sample('b0', 1, null),
    sample('b1', 1, 0.1),
    sample('b2', 1, 0.3),
    sample('b3', 1, 0.2),
  ];
  const ids = (kept: Sample[]) => kept.map((s) => s.rolloutId);
  assert.deepEqual(ids(selectSamples(samples, { samplesPerTask: 4, topFraction: 0.5 })), ['a0', 'a1', 'b2', 'b3']);
  assert.deepEqual(ids(selectSamples(samples, { samplesPerTask: 4, topFraction: 0.25 })), ['a1', 'b2']);
  assert.deepEqual(ids(selectSamples(samples, { samplesPerTask: 4, topFraction: 1, threshold: 0.3 })), [
    'a0',
    'a1',
    'a2',
    'b2',
  ]);
  // A fraction rounds up: 0.3 of 4 keeps 2; and at least one is kept.
  assert.deepEqual(ids(selectSamples(samples, { samplesPerTask: 4, topFraction: 0.3 })), ['a0', 'a1', 'b2', 'b3']);
  assert.deepEqual(ids(selectSamples(samples, { samplesPerTask: 4, topFraction: 0.01 })), ['a1', 'b2']);
});

test('options: defaults filled in, mistakes named; placeholders quoted for the shell', async () => {
  const options = parseSftOptions({ trainCmd: 'python train.py {dataset} {output}' });
  assert.deepEqual(
    [
      options.iterations,
      options.samplesPerTask,
      options.topFraction,
      options.threshold,
      options.format,
      options.outDir,
      options.endpointTemplate,
      options.modelTemplate,
    ],
    [2, 4, 0.25, undefined, 'jsonl', 'sft', '{endpoint}', '{output}'],
  );
  assert.throws(
    () => new SFT({ trainCmd: 'x', topFraction: 0, format: 'csv' as never, iteratons: 2 } as never),
    (error: Error) => {
      assert.match(error.message, /^invalid SFT options: /);
      assert.match(error.message, /topFraction/);
      assert.match(error.message, /format/);
      assert.match(error.message, /iteratons/);
      return true;
    },
  );
  assert.throws(() => parseSftOptions({}), /trainCmd/);
  // An earlier run's iteration folders are never written over.
  const context = { store: {} as LightningStore, train: [], val: [], signal: new AbortController().signal };
  await assert.rejects(
    new SFT({ trainCmd: 'x', outDir: join(dir, 'run') }).run(context),
    /run\/iteration-1 holds files from an earlier run/,
  );

  const values: PlaceholderValues = {
    dataset: "/tmp/it's here/$(touch x).jsonl",
    output: '/tmp/out dir',
    iteration: '1',
    model: 'm',
    endpoint: 'http://e/v1',
    records: '3',
    format: 'jsonl',
  };
  const command = fillPlaceholders(
    `${shellQuote(process.execPath)} -e "console.log(JSON.stringify(process.argv.slice(1)))" {dataset} {output} {unknown} \${PATH+set}`,
    values,
    true,
  );
  const log = join(dir, 'quoting.log');
  const outcome = await runCommand(command, {
    env: {},
    logFile: log,
    graceMs: 1000,
    signal: new AbortController().signal,
  });
  assert.equal(outcome.exitCode, 0);
  assert.deepEqual(JSON.parse(outcome.tail), [values.dataset, values.output, '{unknown}', 'set']);
  assert.equal(fillPlaceholders('{model}@{endpoint}', values, false), 'm@http://e/v1');
});

test('a training command past its timeout is stopped, its process group with it', async () => {
  const stopped = await runCommand(
    `echo begun; exec ${shellQuote(process.execPath)} -e "setInterval(() => {}, 1000)"`,
    {
      env: {},
      logFile: join(dir, 'timeout.log'),
      timeoutMs: 300,
      graceMs: 1000,
      signal: new AbortController().signal,
    },
  );
  assert.deepEqual(
    [stopped.stopped, stopped.exitCode, stopped.signal, stopped.tail],
    ['timeout', null, 'SIGTERM', 'begun'],
  );
});
