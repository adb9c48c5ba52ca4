import assert from 'node:assert/strict';
import { test } from 'node:test';
import { paretoFrontier, planMerge, type PoolEntry } from '../../src/algorithms/gepa/pareto.js';
import { Random } from '../../src/algorithms/shared/random.js';

// A hand-made pool over four validation tasks: v0 the seed; v1 improved the planner, v2 the
// solver, both from v0; v3 is v1 again, worse; v4 ties v1 on the same tasks with a lower mean.
const entry = (version: string, parents: string[], planner: string, solver: string, scores: number[]): PoolEntry => ({
  version,
  parents,
  templates: { planner, solver },
  valScores: scores,
});
const POOL = [
  entry('v0', [], 'P', 'S', [0.5, 0.5, 0, 0]),
  entry('v1', ['v0'], 'P+', 'S', [1, 1, 0, 0.5]),
  entry('v2', ['v0'], 'P', 'S+', [0.5, 0.5, 1, 0.5]),
  entry('v3', ['v1'], 'P++', 'S', [0.5, 0.5, 0, 0]),
];

test('the Pareto frontier keeps the candidates best on some task, weighted by how many, and drops dominated ones', () => {
  assert.deepEqual(
    [...paretoFrontier(POOL)],
    [
      ['v1', 3],
      ['v2', 2],
    ],
  );
  // Best on the same tasks as v1 but with a lower mean: dominated, v1 stays.
  const tie = [...POOL, entry('v4', ['v0'], 'P#', 'S', [1, 1, 0, 0.5])];
  assert.deepEqual([...paretoFrontier(tie).keys()], ['v1', 'v2']);
  assert.deepEqual([...paretoFrontier([POOL[0]])], [['v0', 4]]);
});

test('a merge takes each component from the lineage that changed it since the common ancestor', () => {
  const plan = planMerge(POOL, paretoFrontier(POOL), new Set(), new Random(1));
  assert.deepEqual(plan, {
    parents: ['v1', 'v2'],
    ancestor: 'v0',
    templates: { planner: 'P+', solver: 'S+' },
    from: { planner: 'v1', solver: 'v2' },
  });
  assert.equal(planMerge(POOL, paretoFrontier(POOL), new Set(['v1+v2']), new Random(1)), null);
  // A candidate and its own ancestor are no pair to merge.
  const line = [POOL[0], entry('v1', ['v0'], 'P+', 'S', [1, 0, 0, 0]), entry('v2', ['v1'], 'P+', 'S+', [0, 1, 0, 0])];
  assert.equal(planMerge(line, paretoFrontier(line), new Set(), new Random(1)), null);
});
