import { join } from 'node:path';
import { APO, type APOResult } from '../src/algorithms/apo/index.js';
import { bootstrapMean } from '../src/algorithms/eval/statistics.js';
import { GEPA, type GEPAResult } from '../src/algorithms/gepa/index.js';
import { valScoreOf } from '../src/algorithms/gepa/record.js';
import type { Algorithm } from '../src/algorithms/algorithm.js';
import {
  EXAMPLE_CRITIC_MODEL,
  EXAMPLE_EDITOR_MODEL,
  EXAMPLE_MODEL,
  EXAMPLE_REFLECTOR_MODEL,
  startExampleModel,
} from '../src/runtime/example-model.js';
import { Trainer } from '../src/runtime/trainer.js';
import { fileRows, newTempDir, removeDir } from '../test/support/helpers.js';
import { APPS } from '../test/support/instrumented-app.js';
import { plannerSolverResources, plannerSolverTasks } from '../test/support/planner-solver.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

const AGENT = join(APPS, 'planner-solver-agent.mjs');

/** One search's outcome: the best candidate's score on every validation task, and when it was first reached. */
interface Outcome {
  readonly score: number;
  readonly rolloutsToBest: number;
}

interface Shape {
  readonly seeds: number;
  readonly budget: number;
  readonly train: number;
  readonly val: number;
}

/**
 * GEPA against APO on the offline planner/solver task set (EXAMPLE model; APO with the example
 * critic and editor, GEPA with the example reflector), both over the planner's and the solver's
 * prompt, with the same rollout budget and the same seeds; each search runs until its budget
 * ends it. Per algorithm: the final validation score (mean over seeds, bootstrap interval) and
 * the rollouts spent until the best score was first reached (to the end of the APO round or GEPA
 * iteration that first scored it).
 */
export const promptOptimizers: Benchmark = {
  name: 'prompt-optimizers',
  description: 'GEPA against APO on the offline planner/solver task set: 5 seeds each, a budget of 240 rollouts',
  async run(size: Size): Promise<Figure[]> {
    const shape = sized<Shape>(
      size,
      { seeds: 5, budget: 240, train: 12, val: 8 },
      { seeds: 1, budget: 24, train: 4, val: 4 },
    );
    const model = await startExampleModel();
    const dir = await newTempDir();
    try {
      const figures: Figure[] = [];
      for (const name of ['gepa', 'apo'] as const) {
        const outcomes: Outcome[] = [];
        for (let seed = 0; seed < shape.seeds; seed++)
          outcomes.push(await search(name, seed, model.baseURL, join(dir, `${name}-${seed}.duckdb`), shape));
        figures.push(...summary(name, outcomes));
      }
      return figures;
    } finally {
      await model.close();
      await removeDir(dir);
    }
  },
};

function summary(name: string, outcomes: readonly Outcome[]): Figure[] {
  const score = bootstrapMean(
    outcomes.map((o) => o.score),
    { seed: 0 },
  );
  const mean = (values: number[]) => values.reduce((s, v) => s + v, 0) / values.length;
  const figure = (metric: string, value: number, unit: string) => ({
    name: `prompt_optimizers.${name}.${metric}`,
    value: Number(value.toFixed(3)),
    unit,
    target: '',
  });
  return [
    figure('val_score', score?.mean ?? 0, 'mean reward'),
    figure('val_score_low', score?.low ?? 0, 'mean reward'),
    figure('val_score_high', score?.high ?? 0, 'mean reward'),
    figure('rollouts_to_best', mean(outcomes.map((o) => o.rolloutsToBest)), 'rollouts'),
  ];
}

async function search(name: 'gepa' | 'apo', seed: number, baseURL: string, db: string, shape: Shape): Promise<Outcome> {
  const common = {
    seed,
    maxRollouts: shape.budget,
    baseURL,
    apiKey: 'bench',
    retries: 0,
    resources: plannerSolverResources(baseURL, EXAMPLE_MODEL),
    log: () => {},
  };
  const trainer = (algorithm: Algorithm<unknown, unknown>) =>
    new Trainer({ algorithm, nRunners: 4, db, progress: false }).fit(AGENT, {
      train: plannerSolverTasks(shape.train, 0),
      val: plannerSolverTasks(shape.val, 100),
    });
  // Each searches until the budget stops it. APO scores every candidate on the whole validation
  // set (its batch is the set), as GEPA does, so both best scores are full scores.
  if (name === 'gepa') {
    const gepa = new GEPA({
      ...common,
      iterations: 1000,
      patience: 1000,
      minibatchSize: 3,
      reflectionModel: EXAMPLE_REFLECTOR_MODEL,
    });
    const result = (await trainer(gepa)) as GEPAResult;
    return outcome(
      db,
      'agl_gepa_iteration',
      result.candidates.map((c) => ({ score: valScoreOf(c), step: c.iteration })),
    );
  }
  const apo = new APO({
    ...common,
    rounds: 1000,
    beamWidth: 2,
    branchFactor: 2,
    gradientBatchSize: 3,
    valBatchSize: shape.val,
    criticModel: EXAMPLE_CRITIC_MODEL,
    editorModel: EXAMPLE_EDITOR_MODEL,
    promptResource: ['planner', 'solver'],
  });
  const result = (await trainer(apo)) as APOResult;
  return outcome(
    db,
    'agl_apo_round',
    result.candidates.map((c) => ({ score: c.valScore, step: c.round })),
  );
}

/** The best score, and the rollouts of every step up to the one whose candidate first reached it. */
async function outcome(
  db: string,
  stepKey: string,
  candidates: readonly { score: number | null; step: number }[],
): Promise<Outcome> {
  const best = Math.max(...candidates.map((c) => c.score ?? Number.NEGATIVE_INFINITY));
  const first = candidates.find((c) => c.score === best)?.step ?? 0;
  const [row] = await fileRows(
    db,
    `SELECT count(*)::INTEGER AS n FROM rollouts WHERE TRY_CAST(metadata->>'${stepKey}' AS INTEGER) <= ${first}`,
  );
  return { score: best, rolloutsToBest: Number(row.n) };
}
