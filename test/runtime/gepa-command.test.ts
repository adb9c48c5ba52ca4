import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { EXAMPLE_MODEL, EXAMPLE_REFLECTOR_MODEL, startExampleModel } from '../../src/runtime/example-model.js';
import { fileRows, runCli, tempDir } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { PLANNER_SEED, plannerSolverTasks, SOLVER_SEED } from '../support/planner-solver.js';

// `agl train gepa` on the offline planner/solver task set: options from a YAML file (both
// prompts as its resources), flags over them, and bad options as one line naming them.

test('agl train gepa: a YAML config and flags over it; a bad option is one line naming it, exit 2', async (t) => {
  const dir = await tempDir(t);
  const model = await startExampleModel();
  t.after(() => model.close());
  const lines = (tasks: unknown[]) => tasks.map((x) => JSON.stringify(x)).join('\n');
  await writeFile(join(dir, 'train.jsonl'), lines(plannerSolverTasks(4, 0)));
  await writeFile(join(dir, 'val.jsonl'), lines(plannerSolverTasks(4, 100)));
  const config = `algorithm: gepa
agent: ${join(APPS, 'planner-solver-agent.mjs')}
train: train.jsonl
val: val.jsonl
db: run.duckdb
resources:
  llm: { resource_type: llm, endpoint: "${model.baseURL}", model: ${EXAMPLE_MODEL} }
  planner: { resource_type: prompt_template, template: "${PLANNER_SEED}" }
  solver: { resource_type: prompt_template, template: "${SOLVER_SEED}" }
reflection_model: ${EXAMPLE_REFLECTOR_MODEL}
baseURL: ${model.baseURL}
apiKey: test
iterations: 10
minibatch-size: 2
seed: 1
out: best.json
`;
  await writeFile(join(dir, 'run.yaml'), config);
  const run = await runCli([
    'train',
    'gepa',
    '--config',
    join(dir, 'run.yaml'),
    '--iterations',
    '2',
    '--max-rollouts',
    '100',
    '--no-merge',
  ]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /GEPA run ro-\w+: 2 iterations completed over planner, solver; stopped: 2 iterations done/);
  assert.match(run.stdout, /best - seed {2}[+-]\d\.\d{3} {2}95% interval/);
  assert.match(run.stderr, /gepa: /);
  const best = JSON.parse(await readFile(join(dir, 'best.json'), 'utf8')) as Record<string, string>;
  assert.deepEqual(Object.keys(best).sort(), ['planner', 'solver']);
  const kinds = await fileRows(
    join(dir, 'run.duckdb'),
    "SELECT count(*) FILTER (WHERE status = 'seed')::INTEGER AS seeds FROM prompt_versions WHERE algorithm = 'gepa'",
  );
  assert.equal(kinds[0].seeds, 1);

  const bad = await runCli(['train', 'gepa', '--config', join(dir, 'run.yaml'), '--component-selection', 'random']);
  assert.equal(bad.code, 2);
  assert.equal(bad.stderr.trim().split('\n').length, 1, bad.stderr);
  assert.match(bad.stderr, /--component-selection/);

  await writeFile(join(dir, 'typo.yaml'), config.replace('minibatch-size: 2', 'minibatch: 2'));
  const typo = await runCli(['train', 'gepa', '--config', join(dir, 'typo.yaml')]);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /unknown option minibatch \(from .*typo\.yaml\)/);

  const help = await runCli(['train', '--help']);
  assert.match(help.stdout + help.stderr, /--prompt-resource TEXT \(repeatable\)/);
  assert.match(help.stdout + help.stderr, /--\[no-\]merge {2,}merge two candidates/);
});
