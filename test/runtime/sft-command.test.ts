import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { EXAMPLE_MODEL, startExampleModel } from '../../src/runtime/example-model.js';
import { fileRows, newTempDir, removeDir, ROOT, runCli } from '../support/helpers.js';
import { assertCostAsSql } from '../support/run-cost.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// `agl train sft` through the CLI: the test server is the starting model (it echoes the question),
// a second one the "trained" model, and the training command a stand-in script in the run's
// folder. The agent (apo-agent.mjs) fills its prompt template and earns 1 when the model's
// answer is the task's: q1's answer is the echo, q2's never comes.

const AGENT = join(APPS, 'apo-agent.mjs');
const TASKS = [
  { question: 'q1', answer: 'Echo: q1' },
  { question: 'q2', answer: 'never' },
];

// node stand-in.mjs DATASET OUTPUT: counts the records, writes OUTPUT, and says where the
// trained model is served (the iteration from the environment); FAIL=1 fails instead.
const STAND_IN = `
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
const [dataset, output] = process.argv.slice(2);
const records = readFileSync(dataset, 'utf8').trim().split('\\n').length;
mkdirSync(output, { recursive: true });
writeFileSync(join(output, 'trained.json'), JSON.stringify({ records }));
console.log('trained on ' + records + ' record(s)');
if (process.env.FAIL) {
  console.log('out of memory');
  process.exit(3);
}
console.log('AGL_MODEL_ENDPOINT=' + process.env.TUNED_URL);
console.log('AGL_MODEL_NAME=tuned-' + process.env.AGL_SFT_ITERATION);
`;
const TRAIN_CMD = 'node stand-in.mjs {dataset} {output}';

let dir: string;
let base: OpenAITestServer;
let tuned: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  base = await startOpenAITestServer();
  tuned = await startOpenAITestServer();
  await writeFile(join(dir, 'stand-in.mjs'), STAND_IN);
  await writeFile(join(dir, 'train.jsonl'), TASKS.map((t) => JSON.stringify(t)).join('\n'));
});
after(async () => {
  await base.close();
  await tuned.close();
  await removeDir(dir);
});

/** `agl train sft ARGS` in the run's folder, the tuned server's address in its environment. */
const sft = (args: string[], env: Record<string, string> = {}) =>
  runCli(['train', 'sft', ...args], { cwd: dir, env: { ...process.env, TUNED_URL: tuned.baseURL, ...env } });

/** A config file in the run's folder: the agent, tasks, store and options, the starting model among its resources. */
async function config(name: string, db: string, more = ''): Promise<string> {
  const path = join(dir, name);
  await writeFile(
    path,
    `algorithm: sft
agent: ${AGENT}
train: train.jsonl
db: ${db}
runners: 2
resources:
  llm: { resource_type: llm, endpoint: "${base.baseURL}", model: base-model }
  prompt: { resource_type: prompt_template, template: "{question}", engine: f-string }
samplesPerTask: 2
threshold: 0.5
iterations: 3
${more}`,
  );
  return path;
}

test('agl train sft: the starting model from the config file, options from flags; two iterations end to end', async () => {
  const run = await sft([
    '--config',
    await config('run.yaml', 'run.duckdb'),
    '--train-cmd',
    TRAIN_CMD,
    '--iterations',
    '2',
    '--top-fraction',
    '0.5',
    '--format',
    'jsonl',
    '--out-dir',
    'out',
  ]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^SFT run ro-\w+: 2 iterations trained\n/);
  assert.match(run.stdout, /\niteration +status +mean reward +val reward +kept +records +trained model\n/);
  assert.match(run.stdout, /\n1 +trained +0\.500 +- +1 +1 +tuned-1\n2 +trained +0\.500 +- +1 +1 +tuned-2\n/);
  assert.match(run.stdout, new RegExp(`final model {2}tuned-2 at ${tuned.baseURL} \\(resources rs-`));
  assert.match(run.stderr, /sft: iteration 1\/2: 2 task\(s\) x 2 with base-model/);
  assert.match(run.stderr, / {2}\| trained on 1 record\(s\)/);

  // Each dataset holds q1's transcript: the one rollout kept of the two that earned 1.
  for (const i of [1, 2]) {
    const dataset = await readFile(join(dir, 'out', `iteration-${i}`, 'dataset.jsonl'), 'utf8');
    assert.deepEqual(JSON.parse(dataset), {
      messages: [
        { role: 'user', content: 'q1' },
        { role: 'assistant', content: 'Echo: q1' },
      ],
    });
  }
  assert.deepEqual(new Set(base.requests.map((r) => r.body.model)), new Set(['base-model']));
  assert.deepEqual(new Set(tuned.requests.map((r) => r.body.model)), new Set(['tuned-1']));
  const db = join(dir, 'run.duckdb');
  const iterations = await fileRows(
    db,
    'SELECT iteration, status, records, model FROM sft_iterations ORDER BY iteration',
  );
  assert.deepEqual(iterations, [
    { iteration: 1, status: 'trained', records: 1, model: 'tuned-1' },
    { iteration: 2, status: 'trained', records: 1, model: 'tuned-2' },
  ]);
  const versions = await fileRows(db, `SELECT resources->'llm'->>'model' AS model FROM resources ORDER BY create_time`);
  assert.deepEqual(
    versions.map((v) => v.model),
    ['base-model', 'tuned-1', 'tuned-2'],
  );
  // The cost is what SQL counts over the run's rollouts: 2 iterations x 2 tasks x 2 samples.
  const runId = /^SFT run (ro-\w+)/.exec(run.stdout)?.[1];
  assert.equal(await assertCostAsSql(run.stdout, db, `(metadata->>'agl.sft.run') = '${runId}'`), 8);
});

test('agl train sft: the starting model from --llm-model and --llm-endpoint', async () => {
  const db = join(dir, 'flags.duckdb');
  const run = await sft([
    '--agent',
    AGENT,
    '--train',
    'train.jsonl',
    '--db',
    db,
    '--prompt',
    '{question}',
    '--llm-model',
    'flag-model',
    '--llm-endpoint',
    base.baseURL,
    '--train-cmd',
    TRAIN_CMD,
    '--iterations',
    '1',
    '--samples-per-task',
    '1',
    '--out-dir',
    'flags',
    '--quiet',
  ]);
  assert.equal(run.code, 0, run.stderr);
  // No threshold here: each task's one rollout is kept, q2's with its 0 too.
  assert.match(run.stdout, /\n1 +trained +0\.500 +- +2 +2 +tuned-1\n/);
  assert.equal(run.stderr, '');
  assert.ok(base.requests.some((r) => r.body.model === 'flag-model'));
  const versions = await fileRows(db, `SELECT resources->'llm'->>'model' AS model FROM resources ORDER BY create_time`);
  assert.deepEqual(
    versions.map((v) => v.model),
    ['flag-model', 'tuned-1'],
  );
});

test('agl train sft: a bad option, no starting model and a failing command each say what is wrong', async () => {
  const bad = await sft([
    '--config',
    await config('bad.yaml', 'bad.duckdb', 'iteratons: 2\n'),
    '--train-cmd',
    TRAIN_CMD,
  ]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^agl: invalid sft options: unknown option iteratons \(from .*bad\.yaml\)/);

  const wrong = await sft([
    '--config',
    await config('wrong.yaml', 'wrong.duckdb'),
    '--train-cmd',
    TRAIN_CMD,
    '--top-fraction',
    '2',
    '--format',
    'csv',
  ]);
  assert.equal(wrong.code, 2);
  assert.match(wrong.stderr, /^agl: invalid sft options: /);
  assert.match(wrong.stderr, /--top-fraction must be a number <= 1 \(given "2"\)/);
  assert.match(wrong.stderr, /--format must be one of jsonl\|parquet \(given "csv"\)/);
  assert.equal(wrong.stderr.trim().split('\n').length, 1, wrong.stderr);

  const noModel = await sft([
    '--agent',
    AGENT,
    '--train',
    'train.jsonl',
    '--db',
    join(dir, 'none.duckdb'),
    '--train-cmd',
    TRAIN_CMD,
    '--out-dir',
    'none',
  ]);
  assert.equal(noModel.code, 1);
  assert.match(noModel.stderr, /^agl: SFT needs a starting model: .*--llm-model/);

  const failing = await sft(
    ['--config', await config('failing.yaml', 'failing.duckdb'), '--train-cmd', TRAIN_CMD, '--out-dir', 'failing'],
    { FAIL: '1' },
  );
  assert.equal(failing.code, 1);
  assert.match(
    failing.stderr,
    /\nagl: SFT iteration 1: the training command exited with code 3 \(dataset kept: .*failing\/iteration-1\/dataset\.jsonl\)/,
  );
  assert.match(failing.stderr, /\nout of memory\n/);
  assert.doesNotMatch(failing.stderr, /\n {4}at /, 'no stack trace');
});

test('agl train sft --eval: the first and the last model on the tasks of a file, stored as an eval run', async (t) => {
  // The offline EXAMPLE model plays both: it answers by rules whatever the model's name, so
  // training changed nothing and the paired difference must say so.
  const example = await startExampleModel();
  t.after(() => example.close());
  const questions: [string, number][] = [
    ['12 + 30', 42],
    ['7 * 6', 42],
    ['100 - 58', 42],
    ['9 * 9', 81],
  ];
  const tasks = questions.map(([q, answer]) => JSON.stringify({ question: `What is ${q}?`, answer }));
  await writeFile(join(dir, 'arithmetic.jsonl'), tasks.slice(0, 2).join('\n'));
  await writeFile(join(dir, 'eval.jsonl'), tasks.join('\n'));
  const db = join(dir, 'eval.duckdb');
  const args = [
    '--agent',
    join(ROOT, 'examples', 'demo', 'agent.mjs'),
    '--train',
    'arithmetic.jsonl',
    '--db',
    db,
    '--prompt',
    'Answer with the number only. {question}',
    '--llm-model',
    EXAMPLE_MODEL,
    '--llm-endpoint',
    example.baseURL,
    '--train-cmd',
    TRAIN_CMD,
    '--iterations',
    '1',
    '--samples-per-task',
    '1',
    '--out-dir',
    'evaluated',
    '--quiet',
  ];
  const run = await sft([...args, '--eval', 'eval.jsonl'], { TUNED_URL: example.baseURL });
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^SFT run ro-\w+: 1 iteration trained\n/);
  assert.match(run.stdout, /\nEvaluation ro-\w+: 2 variants, 4 tasks x 1 sample, seed 0\n/);
  // Unasked to be careful, the example model slips on one of the four, before and after.
  assert.match(run.stdout, /\nfirst +0\.750 +\[[-\d.]+, [\d.]+\] +75% .*\nlast +0\.750 +\[[-\d.]+, [\d.]+\] +75% /);
  assert.match(
    run.stdout,
    /last - first: \+0\.000 \[\+0\.000, \+0\.000\] over 4 tasks, p = 1\.000\n {2}no detectable difference/,
  );

  const variants = await fileRows(
    db,
    `SELECT e.variant, e.tasks, e.difference, r.resources->'llm'->>'model' AS model
     FROM evaluations e JOIN resources r USING (resources_id) ORDER BY e.position`,
  );
  assert.deepEqual(variants, [
    { variant: 'first', tasks: 4, difference: null, model: EXAMPLE_MODEL },
    { variant: 'last', tasks: 4, difference: 0, model: 'tuned-1' },
  ]);
  const calls = await fileRows(
    db,
    `SELECT model, count(*)::INTEGER AS n FROM llm_calls JOIN rollouts USING (rollout_id)
     WHERE rollouts.mode = 'test' GROUP BY model ORDER BY model`,
  );
  assert.deepEqual(calls, [
    { model: EXAMPLE_MODEL, n: 4 },
    { model: 'tuned-1', n: 4 },
  ]);

  const missing = await sft([...args, '--eval', 'missing.jsonl']);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /^agl: --eval .*missing\.jsonl: no such file\n/);
});
