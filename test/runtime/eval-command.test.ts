import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { startExampleModel, EXAMPLE_MODEL } from '../../src/runtime/example-model.js';
import { fileRows, ROOT, runCli, spawnServe, tempDir } from '../support/helpers.js';
import { assertCostAsSql } from '../support/run-cost.js';

const AGENT = join(ROOT, 'examples', 'demo', 'agent.mjs');
const QUESTIONS: [number, string, number][] = [
  [12, '+', 30],
  [7, '*', 6],
  [100, '-', 58],
  [9, '*', 9],
  [250, '+', 250],
  [81, '-', 39],
];
const PLAIN = '{question}';
const STRICT = 'Work carefully and double-check your arithmetic. Answer with the number only. {question}';

async function taskFile(dir: string): Promise<string> {
  const path = join(dir, 'tasks.jsonl');
  const lines = QUESTIONS.map(([a, op, b]) =>
    JSON.stringify({ question: `What is ${a} ${op} ${b}?`, answer: op === '+' ? a + b : op === '-' ? a - b : a * b }),
  );
  await writeFile(path, `${lines.join('\n')}\n`);
  return path;
}

test('agl eval in process: the better prompt wins with an interval that excludes 0, stored in the views', async (t) => {
  const dir = await tempDir(t);
  const model = await startExampleModel();
  t.after(() => model.close());
  const db = join(dir, 'eval.duckdb');
  const out = join(dir, 'report.json');
  const llm = ['--llm-model', EXAMPLE_MODEL, '--llm-endpoint', model.baseURL];
  const tasks = await taskFile(dir);
  const result = await runCli(
    [
      'eval',
      '--agent',
      AGENT,
      '--tasks',
      tasks,
      '--db',
      db,
      ...llm,
      '--name',
      'plain',
      '--prompt',
      PLAIN,
      '--name',
      'strict',
      '--prompt',
      STRICT,
      '--name',
      'same',
      '--prompt',
      PLAIN,
      '--samples',
      '2',
      '--seed',
      '3',
      '--out',
      out,
      // The server the Trainer starts requires the token; its runners, the agent's gateway calls
      // and the recorded spans carry it.
    ],
    { env: { ...process.env, AGL_TOKEN: 'eval-token' } },
  );
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /plain\s+0\.000\s+\[0\.000, 0\.000\]\s+0%\s+\[0%, 24%\]\s+0\/12/);
  assert.match(result.stdout, /strict\s+1\.000\s+\[1\.000, 1\.000\]\s+100%/);
  assert.match(
    result.stdout,
    /strict - plain: \+1\.000 \[\+1\.000, \+1\.000\] over 6 tasks, p = 0\.031\n\s+strict is better/,
  );
  assert.match(
    result.stdout,
    /same - plain: \+0\.000 \[\+0\.000, \+0\.000\] over 6 tasks, p = 1\.000\n\s+no detectable difference/,
  );

  const report = JSON.parse(await readFile(out, 'utf8'));
  assert.equal(report.pairs[0].difference.detected, true);
  assert.equal(report.variants[1].tasks.length, 6);

  const variants = await fileRows(
    db,
    'SELECT variant, position, scored, failed, mean, difference, difference_low, p_value FROM evaluations ORDER BY position',
  );
  assert.deepEqual(
    variants.map((v) => [v.variant, v.scored, v.failed, v.mean, v.difference]),
    [
      ['plain', 12, 0, 0, null],
      ['strict', 12, 0, 1, 1],
      ['same', 12, 0, 0, 0],
    ],
  );
  const rows = await fileRows(
    db,
    `SELECT count(*)::INTEGER AS n, sum(change)::DOUBLE AS change,
      sum(json_array_length(rollout_ids))::INTEGER AS rollouts FROM evaluation_tasks WHERE variant = 'strict'`,
  );
  assert.deepEqual(rows[0], { n: 6, change: 6, rollouts: 12 });
  // Interleaved: the variants' rollouts alternate in the queue, each (task, sample) with one seed.
  const seeds = await fileRows(
    db,
    `SELECT count(DISTINCT metadata->>'seed')::INTEGER AS n FROM rollouts WHERE mode = 'test'`,
  );
  assert.equal(seeds[0].n, 12);
  // The cost is what SQL counts over the evaluation's rollouts: 3 variants x 6 tasks x 2 samples.
  const runId = /Evaluation (ro-\w+)/.exec(result.stdout)?.[1];
  const where = `(metadata->'agl_eval'->>'run_id') = '${runId}'`;
  assert.equal(await assertCostAsSql(result.stdout, db, where), 36);

  const bad = await runCli([
    'eval',
    '--agent',
    AGENT,
    '--tasks',
    tasks,
    '--db',
    db,
    '--prompt',
    'a',
    '--prompt',
    'b',
    '--name',
    'x',
    '--name',
    'y',
    '--name',
    'z',
  ]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--prompt is given 2 times for 3 variants/);
  const out2 = await runCli([
    'eval',
    '--agent',
    AGENT,
    '--tasks',
    tasks,
    '--db',
    db,
    '--prompt',
    'a',
    '--out',
    'r.txt',
  ]);
  assert.match(out2.stderr, /r\.txt: the report is \.json or \.md/);
  const budget = await runCli([
    'eval',
    '--agent',
    AGENT,
    '--tasks',
    tasks,
    '--db',
    db,
    '--prompt',
    'a',
    '--max-rollouts',
    '3',
  ]);
  assert.match(budget.stderr, /--max-rollouts 3 is too small: 6 tasks x 1 samples x 1 variants take 6 rollouts/);
  const missing = await runCli(['eval', '--agent', AGENT, '--tasks', tasks, '--db', db, '--resources', 'rs-none']);
  assert.match(missing.stderr, /variant "v1": no resources "rs-none" in the store/);
});

test('agl eval --url: runners in other processes, a failing variant reported with its failures', async (t) => {
  const dir = await tempDir(t);
  const model = await startExampleModel();
  t.after(() => model.close());
  const server = await spawnServe(['--db', join(dir, 'served.duckdb')]);
  t.after(() => {
    server.child.kill('SIGTERM');
  });
  const tasks = await taskFile(dir);
  // 6 tasks x 2 variants: two runner processes, each leaving after 6 rollouts.
  const runners = [1, 2].map(() => runCli(['runner', AGENT, '--store', server.url, '--max-rollouts', '6']));
  const result = await runCli([
    'eval',
    '--url',
    server.url,
    '--tasks',
    tasks,
    '--prompt',
    STRICT,
    '--llm-model',
    EXAMPLE_MODEL,
    '--name',
    'works',
    '--llm-endpoint',
    model.baseURL,
    '--name',
    'broken',
    '--llm-endpoint',
    'http://127.0.0.1:9/v1',
    '--rollout-timeout-seconds',
    '30',
  ]);
  await Promise.all(runners);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /works\s+1\.000/);
  assert.match(result.stdout, /broken\s+-\s+-\s+-\s+-\s+6\/6/);
  assert.match(result.stdout, /broken: 6 of 6 rollouts failed and are left out of its scores \(6 failed\)/);
  assert.match(result.stdout, /broken - works: no task that both scored/);
});
