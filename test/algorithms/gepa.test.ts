import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { GEPA, type GEPAOptionsInput, type GEPAResult } from '../../src/algorithms/gepa/index.js';
import type { NamedResources } from '../../src/api/types.js';
import { EXAMPLE_MODEL, EXAMPLE_REFLECTOR_MODEL, startExampleModel } from '../../src/runtime/example-model.js';
import { reflect } from '../../src/runtime/example-rules.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { fileRows, tempDir } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer } from '../support/openai-server.js';
import { PLANNER_SEED, plannerSolverResources, plannerSolverTasks, SOLVER_SEED } from '../support/planner-solver.js';

// GEPA on the offline planner/solver task set (EXAMPLE model and reflector): the better pair asks
// the planner to double-check and the solver for the number only.

const AGENT = join(APPS, 'planner-solver-agent.mjs');
const TRAIN = plannerSolverTasks(6, 0);
const VAL = plannerSolverTasks(6, 100);
const OPTIONS: GEPAOptionsInput = {
  iterations: 5,
  minibatchSize: 3,
  reflectionModel: EXAMPLE_REFLECTOR_MODEL,
  apiKey: 'test',
  retries: 0,
  retryBackoffSeconds: 0.01,
  seed: 3,
};

async function runGepa(
  baseURL: string,
  db: string,
  options: GEPAOptionsInput & { resources?: NamedResources } = {},
  log: string[] = [],
): Promise<GEPAResult> {
  const gepa = new GEPA({
    ...OPTIONS,
    baseURL,
    resources: plannerSolverResources(baseURL, EXAMPLE_MODEL),
    log: (line) => log.push(line),
    ...options,
  });
  return new Trainer({ algorithm: gepa, nRunners: 4, db, progress: false }).fit(AGENT, { train: TRAIN, val: VAL });
}

test('GEPA finds the better pair of prompts, the same with the same seed, and shows what each version changed', async (t) => {
  const dir = await tempDir(t);
  const model = await startExampleModel();
  t.after(() => model.close());
  const first = await runGepa(model.baseURL, join(dir, 'a.duckdb'));
  const second = await runGepa(model.baseURL, join(dir, 'b.duckdb'));

  assert.deepEqual(first.components, ['planner', 'solver']);
  assert.ok((first.seed.valScores ?? []).length === VAL.length);
  assert.match(first.best.templates.solver, /number only/);
  assert.match(first.best.templates.planner, /double-check/);
  assert.ok(first.best.templates.planner.endsWith(PLANNER_SEED) && first.best.templates.solver.endsWith(SOLVER_SEED));
  assert.equal(
    first.best.valScores?.every((s) => s === 1),
    true,
  );
  assert.ok(first.difference && first.difference.mean > 0 && first.difference.low > 0);
  assert.deepEqual(
    second.candidates.map((c) => [c.version, c.kind, c.components, c.templates, c.rejected]),
    first.candidates.map((c) => [c.version, c.kind, c.components, c.templates, c.rejected]),
  );

  const versions = await fileRows(
    join(dir, 'a.duckdb'),
    "SELECT version, algorithm, component, status, val_score, is_best, in_beam FROM prompt_versions WHERE algorithm = 'gepa'",
  );
  assert.deepEqual(
    versions.map((v) => [v.version, v.component, v.status]),
    first.candidates.map((c) => [
      c.version,
      c.components.join(',') || null,
      c.kind === 'seed' ? 'seed' : c.rejected ? 'rejected' : 'candidate',
    ]),
  );
  assert.equal(versions.find((v) => v.is_best)?.version, first.best.version);
  assert.equal(versions.find((v) => v.is_best)?.val_score, 1);

  // What each candidate is, in SQL: its kind and every parent.
  const lineage = await fileRows(
    join(dir, 'a.duckdb'),
    "SELECT version, kind, parent, to_json(parents)::VARCHAR AS parents FROM prompt_versions WHERE algorithm = 'gepa'",
  );
  assert.deepEqual(
    lineage.map((v) => [v.version, v.kind, v.parent, JSON.parse(String(v.parents))]),
    first.candidates.map((c) => [c.version, c.kind, c.parents[0] ?? null, c.parents]),
  );
  // Every iteration's frontier, not only the last.
  const frontiers = await fileRows(
    join(dir, 'a.duckdb'),
    "SELECT round, count(*)::INTEGER AS n FROM prompt_frontiers WHERE algorithm = 'gepa' GROUP BY round ORDER BY round",
  );
  assert.deepEqual(
    frontiers.map((f) => f.round),
    Array.from({ length: first.iterations + 1 }, (_, i) => i),
  );
});

test('GEPA stops within its rollout budget, survives a failed reflection, never keeps a dropped placeholder, and resumes', async (t) => {
  const dir = await tempDir(t);
  const example = await startExampleModel();
  t.after(() => example.close());
  // The reflection model: fails once, then drops the placeholder, then rewrites like the example reflector.
  let reflections = 0;
  const server = await startOpenAITestServer({
    chat: (body) => {
      reflections++;
      if (reflections === 1) return { status: 500 };
      if (reflections === 2) return { content: '<prompt>Answer with the number only.</prompt>' };
      return { content: reflect(String(body.messages.at(-1)?.content ?? '')) };
    },
  });
  t.after(() => server.close());
  const db = join(dir, 'gepa.duckdb');
  const options = {
    componentSelection: 'blame' as const,
    resources: plannerSolverResources(example.baseURL, EXAMPLE_MODEL),
  };
  const log: string[] = [];
  const first = await runGepa(server.baseURL, db, { ...options, maxRollouts: 20 }, log);
  assert.equal(first.stopped, 'budget');
  // The cost is what the run spent, as SQL counts it: the iteration the budget cut short included.
  const spent = Number(/\((\d+) spent\)/.exec(first.stopReason)?.[1]);
  const [{ n }] = await fileRows(
    db,
    `SELECT count(*)::INTEGER AS n FROM rollouts WHERE metadata->>'agl_run' = '${first.runId}'`,
  );
  assert.deepEqual([first.cost.total.rollouts, spent], [Number(n), Number(n)]);
  assert.equal(
    first.cost.iterations.reduce((sum, c) => sum + c.rollouts, 0),
    Number(n),
    'the iterations add up',
  );
  assert.ok(Number(n) <= 20);
  assert.ok(
    log.some((line) => /reflection failed/.test(line)),
    log.join('\n'),
  );
  const dropped = first.candidates.find((c) => c.rejected?.includes('drops the placeholder'));
  assert.ok(dropped && dropped.resourcesId === null, JSON.stringify(first.candidates));
  for (const c of first.candidates.filter((c) => c.valScores !== null)) {
    assert.match(c.templates.solver, /\{step\} \{rest\}/);
    assert.match(c.templates.planner, /\{question\}/);
  }

  const resumed = await runGepa(server.baseURL, db, { ...options, resume: true, iterations: first.iterations + 2 });
  assert.equal(resumed.runId, first.runId);
  assert.ok(resumed.iterations > first.iterations);
  assert.deepEqual(
    resumed.candidates.slice(0, first.candidates.length).map((c) => c.version),
    first.candidates.map((c) => c.version),
  );
  assert.ok(
    (resumed.best.valScores ?? []).reduce((s, v) => s + v, 0) >=
      (first.best.valScores ?? []).reduce((s, v) => s + v, 0),
  );
});
