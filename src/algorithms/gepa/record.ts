import { GEPA_RUN } from '../../api/run-records.js';
import type { AlgorithmRun } from '../shared/algorithm-run.js';
import type { BatchPosition } from '../shared/random.js';
import type { SearchCost } from '../shared/cost-clock.js';

/**
 * How a GEPA run is kept in the store: spans of the run's own rollout (shared/algorithm-run.ts),
 * read by the `prompt_versions` view (src/sql/views.ts, docs/sql.md) and by a resumed run. Their
 * names and attributes are declared once, in src/api/run-records.ts.
 */

const { spans: SPAN, attributes: A } = GEPA_RUN;

/** A set of prompts the search made or started from. */
export interface GepaCandidate {
  /** v0 for the seed, then v1, v2 ... in the order they were made (unique within a run). */
  readonly version: string;
  /** Its resources version; null for a candidate rejected before it ran (it drops a placeholder). */
  readonly resourcesId: string | null;
  readonly kind: 'seed' | 'mutation' | 'merge';
  /** The components it changed: a mutation's against its parent, a merge's against the parents' common ancestor; empty for the seed. */
  readonly components: readonly string[];
  /** One for a mutation, two for a merge. */
  readonly parents: readonly string[];
  readonly iteration: number;
  /** Component name -> template. */
  readonly templates: Readonly<Record<string, string>>;
  /** The reflection model's answer it was made from; null for the seed and merges. */
  readonly reflection: string | null;
  /** The parent's (for a merge: the better parent's) mean reward on the minibatch it was tried on. */
  readonly parentBatchScore: number | null;
  readonly batchScore: number | null;
  /** Why it did not join the pool; null when it did. */
  readonly rejected: string | null;
  /** Its score on each validation task, once it joined the pool. */
  valScores: number[] | null;
}

export const valScoreOf = (c: GepaCandidate): number | null =>
  c.valScores === null ? null : c.valScores.reduce((s, v) => s + v, 0) / Math.max(1, c.valScores.length);

/** What the search costs, for one iteration or all of them; its model seconds wait for the reflection model. */
export interface GepaCost extends SearchCost {
  reflectionTokens: number;
}

export const noCost = (): GepaCost => ({
  rollouts: 0,
  reflectionTokens: 0,
  seconds: 0,
  rolloutSeconds: 0,
  modelSeconds: 0,
});

/** Where the search stands after an iteration: all a resumed run needs besides the candidates. */
export interface GepaState {
  /** Iterations done; 0 once the seed is scored. */
  readonly iteration: number;
  /** The candidates with validation scores, in the order they joined. */
  readonly pool: readonly string[];
  /** The state of the search's generator. */
  readonly random: number;
  readonly train: BatchPosition;
  /** Merges are tried on validation subsamples. */
  readonly val: BatchPosition;
  /** Per candidate, the component its next mutation changes (round robin). */
  readonly cursors: Readonly<Record<string, number>>;
  readonly merges: number;
  /** Pairs whose merge was tried ("a+b"). */
  readonly tried: readonly string[];
  /** Proposals in a row that left the frontier as it was. */
  readonly stale: number;
  /** Whether the last iteration's mutation joined the pool (a merge is tried after one). */
  readonly improved: boolean;
  readonly trainSize: number;
  readonly valSize: number;
}

export function recordCandidate(run: AlgorithmRun, c: GepaCandidate): Promise<void> {
  return run.record(SPAN.candidate, {
    [A.version]: c.version,
    [A.resourcesId]: c.resourcesId,
    [A.kind]: c.kind,
    [A.component]: c.components.join(','),
    [A.parents]: c.parents.join(','),
    [A.iteration]: c.iteration,
    [A.templates]: JSON.stringify(c.templates),
    [A.reflection]: c.reflection,
    [A.parentBatchScore]: c.parentBatchScore,
    [A.batchScore]: c.batchScore,
    [A.status]: c.kind === 'seed' ? 'seed' : c.rejected === null ? 'candidate' : 'rejected',
    [A.reason]: c.rejected,
  });
}

/** What one evaluation gave one candidate: its mean, and each task's reward in task order. */
export interface GepaScore {
  readonly version: string;
  readonly score: number;
  readonly tasks: readonly number[];
  readonly rollouts: number;
  readonly failed: number;
}

/** The scores of one evaluation, one span: `minibatch` (training tasks or a merge's validation subsample) or `val` (every validation task). */
export function recordScores(
  run: AlgorithmRun,
  iteration: number,
  split: 'minibatch' | 'val',
  scores: readonly GepaScore[],
): Promise<void> {
  return run.record(SPAN.scores, { [A.iteration]: iteration, [A.split]: split, [A.scores]: JSON.stringify(scores) });
}

export function recordSkipped(run: AlgorithmRun, iteration: number, parent: string, reason: string): Promise<void> {
  return run.record(SPAN.skipped, { [A.iteration]: iteration, [A.parents]: parent, [A.reason]: reason });
}

export function recordIteration(
  run: AlgorithmRun,
  state: GepaState,
  best: string,
  frontier: readonly string[],
  cost: GepaCost,
): Promise<void> {
  return run.record(SPAN.iteration, {
    [A.iteration]: state.iteration,
    [A.best]: best,
    [A.frontier]: frontier.join(','),
    [A.state]: JSON.stringify(state),
    [A.cost]: JSON.stringify(cost),
  });
}

export function recordBest(run: AlgorithmRun, best: GepaCandidate, stopped: string): Promise<void> {
  return run.record(SPAN.best, {
    [A.version]: best.version,
    [A.resourcesId]: best.resourcesId,
    [A.score]: valScoreOf(best),
    [A.stopped]: stopped,
  });
}

/** What a run recorded so far: its candidates with their validation scores, and its completed iterations. */
export async function readRun(
  run: AlgorithmRun,
): Promise<{ candidates: Map<string, GepaCandidate>; iterations: { state: GepaState; cost: GepaCost }[] }> {
  const candidates = new Map<string, GepaCandidate>();
  for (const { attributes: a } of await run.read(SPAN.candidate)) {
    const version = String(a[A.version]);
    const list = (key: string) => (a[key] ? String(a[key]).split(',') : []);
    candidates.set(version, {
      version,
      resourcesId: text(a[A.resourcesId]),
      kind: String(a[A.kind]) as GepaCandidate['kind'],
      components: list(A.component),
      parents: list(A.parents),
      iteration: Number(a[A.iteration] ?? 0),
      templates: JSON.parse(String(a[A.templates] ?? '{}')) as Record<string, string>,
      reflection: text(a[A.reflection]),
      parentBatchScore: number(a[A.parentBatchScore]),
      batchScore: number(a[A.batchScore]),
      rejected: text(a[A.reason]),
      valScores: null,
    });
  }
  for (const { attributes: a } of await run.read(SPAN.scores)) {
    if (a[A.split] !== 'val') continue;
    for (const score of JSON.parse(String(a[A.scores] ?? '[]')) as GepaScore[]) {
      const candidate = candidates.get(score.version);
      if (candidate) candidate.valScores = [...score.tasks];
    }
  }
  const iterations = (await run.read(SPAN.iteration)).map((span) => ({
    state: JSON.parse(String(span.attributes[A.state])) as GepaState,
    cost: JSON.parse(String(span.attributes[A.cost])) as GepaCost,
  }));
  return { candidates, iterations };
}

const text = (value: unknown): string | null => (value === undefined || value === null ? null : String(value));
const number = (value: unknown): number | null => (typeof value === 'number' && Number.isFinite(value) ? value : null);
