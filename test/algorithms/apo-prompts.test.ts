import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { APO } from '../../src/algorithms/apo/index.js';
import { formatApoReport } from '../../src/algorithms/apo/report.js';
import {
  EXAMPLE_CRITIC_MODEL,
  EXAMPLE_EDITOR_MODEL,
  EXAMPLE_MODEL,
  startExampleModel,
} from '../../src/runtime/example-model.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { fileRows, tempDir } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { PLANNER_SEED, plannerSolverResources, plannerSolverTasks, SOLVER_SEED } from '../support/planner-solver.js';

// APO over two prompts (the offline planner/solver task set): each edit changes one of them, in turn.

test('APO over several prompts edits one at a time, in turn, and shows which one each version changed', async (t) => {
  const dir = await tempDir(t);
  const model = await startExampleModel();
  t.after(() => model.close());
  const db = join(dir, 'run.duckdb');
  const out = join(dir, 'best.json');
  const apo = new APO({
    rounds: 1,
    beamWidth: 2,
    branchFactor: 2,
    gradientBatchSize: 2,
    valBatchSize: 4,
    criticModel: EXAMPLE_CRITIC_MODEL,
    editorModel: EXAMPLE_EDITOR_MODEL,
    baseURL: model.baseURL,
    apiKey: 'test',
    retries: 0,
    promptResource: ['planner', 'solver'],
    out,
    resources: plannerSolverResources(model.baseURL, EXAMPLE_MODEL),
    log: () => {},
  });
  const result = await new Trainer({ algorithm: apo, nRunners: 4, db, progress: false }).fit(
    join(APPS, 'planner-solver-agent.mjs'),
    { train: plannerSolverTasks(4, 0), val: plannerSolverTasks(4, 100) },
  );

  assert.deepEqual(result.components, ['planner', 'solver']);
  assert.deepEqual(result.seed.templates, { planner: PLANNER_SEED, solver: SOLVER_SEED });
  const edited = result.candidates.filter((c) => c.parent !== null);
  assert.deepEqual(
    edited.map((c) => c.component),
    ['planner', 'solver', 'planner', 'solver'],
  );
  assert.ok((result.best.valScore ?? 0) > (result.seed.valScore ?? 1), 'an edit of one prompt helped');
  for (const c of edited) {
    const other = c.component === 'planner' ? 'solver' : 'planner';
    assert.equal(c.templates[other], result.seed.templates[other], `${c.version} changed only ${c.component}`);
    assert.equal(c.template, c.templates[c.component ?? '']);
  }

  const versions = await fileRows(
    db,
    "SELECT version, component, prompt_resource, template, templates FROM prompt_versions WHERE algorithm = 'apo'",
  );
  assert.deepEqual(
    versions.map((v) => [v.version, v.component, v.templates]),
    result.candidates.map((c) => [c.version, c.component ?? 'planner,solver', c.templates]),
  );
  const latest = await fileRows(db, 'SELECT resources FROM resources ORDER BY update_time DESC LIMIT 1');
  const published = latest[0].resources as Record<string, { template?: string }>;
  assert.equal(published.planner.template, result.best.templates.planner);
  assert.equal(published.solver.template, result.best.templates.solver);
  assert.deepEqual(JSON.parse(await readFile(out, 'utf8')), result.best.templates);
  assert.match(formatApoReport(result), /best solver prompt:/);
});
