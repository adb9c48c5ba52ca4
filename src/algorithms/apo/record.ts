import { APO_RUN } from '../../api/run-records.js';
import type { Span } from '../../api/types.js';
import type { AlgorithmRun } from '../shared/algorithm-run.js';
import type { BatchPosition } from '../shared/random.js';
import type { SearchCost } from '../shared/cost-clock.js';

/**
 * How an APO run is kept in the store: spans of the run's own rollout (shared/algorithm-run.ts), read by
 * the `prompt_versions` view (src/sql/views.ts, docs/sql.md) and by a resumed run. Their names
 * and attributes are declared once, in src/api/run-records.ts.
 */

const { spans: SPAN, attributes: A } = APO_RUN;

/** A prompt the search made or started from. */
export interface Candidate {
  /** v0 for the seed, then v1, v2 ... in the order they were made (unique within a run). */
  readonly version: string;
  /** Its resources version in the store; null for a rejected candidate, which never becomes one. */
  readonly resourcesId: string | null;
  /** The prompt_template resource its edit changed; null for the seed. */
  readonly component: string | null;
  /** The template of that component (the seed's: of the first component). */
  readonly template: string;
  /** Every component's template: resource name -> template. */
  readonly templates: Readonly<Record<string, string>>;
  readonly parent: string | null;
  readonly round: number;
  /** The critique it was edited from; null for the seed. */
  readonly critique: string | null;
  /** The parent's mean reward on the training batch the critique read. */
  readonly gradientScore: number | null;
  /** Why it was rejected; null when it was not. */
  readonly rejected: string | null;
  /** The score on the latest validation batch it was evaluated on. */
  batchScore: number | null;
  /** The score on the whole validation set, when it was evaluated on it. */
  valScore: number | null;
  /** Its reward on each validation task (in their order) when it was scored on all of them; null for no reward. */
  valRewards: readonly (number | null)[] | null;
}

/** What the search costs, for one round or all of them; its model seconds wait for critic and editor answers. */
export interface Cost extends SearchCost {
  criticTokens: number;
  editorTokens: number;
}

export const noCost = (): Cost => ({
  rollouts: 0,
  criticTokens: 0,
  editorTokens: 0,
  seconds: 0,
  rolloutSeconds: 0,
  modelSeconds: 0,
});

/** Where the search stands after a round: all a resumed run needs besides the candidates. */
export interface SearchState {
  /** Rounds done; 0 once the seed is scored. */
  readonly round: number;
  /** Versions in the beam, best first. */
  readonly beam: readonly string[];
  readonly best: string;
  /** The state of the search's generator (parents, prompt variants, request seeds). */
  readonly random: number;
  /** Edits made so far (the round robin over components); absent in runs of one prompt recorded before it. */
  readonly edits?: number;
  readonly train: BatchPosition;
  readonly val: BatchPosition;
  /** The data sizes the positions refer to. */
  readonly trainSize: number;
  readonly valSize: number;
}

/** `promptResource`: the component the candidate changed; for the seed, every component, comma-separated. */
export function recordCandidate(run: AlgorithmRun, c: Candidate, promptResource: string): Promise<void> {
  return run.record(SPAN.candidate, {
    [A.version]: c.version,
    [A.resourcesId]: c.resourcesId,
    [A.promptResource]: promptResource,
    [A.parent]: c.parent,
    [A.round]: c.round,
    [A.template]: c.template,
    [A.templates]: JSON.stringify(c.templates),
    [A.critique]: c.critique,
    [A.gradientScore]: c.gradientScore,
    [A.status]: c.parent === null ? 'seed' : c.rejected === null ? 'candidate' : 'rejected',
    [A.reason]: c.rejected,
  });
}

/** What one evaluation gave one prompt. */
interface Score {
  readonly version: string;
  readonly score: number;
  readonly rollouts: number;
  readonly failed: number;
  /** On the whole validation set (split val): each task's reward, in task order, for paired comparisons. */
  readonly rewards?: readonly (number | null)[];
}

/**
 * The scores of one evaluation, as one span (a write per evaluation, not per prompt: each span
 * is a commit). `split`: train (parents on the critiques' batches), val_batch (a round's batch)
 * or val (the whole validation set).
 */
export function recordScores(
  run: AlgorithmRun,
  round: number,
  split: 'train' | 'val_batch' | 'val',
  scores: readonly Score[],
): Promise<void> {
  return run.record(SPAN.scores, {
    [A.round]: round,
    [A.split]: split,
    [A.scores]: JSON.stringify(scores),
  });
}

export function recordSkipped(run: AlgorithmRun, round: number, parent: string, reason: string): Promise<void> {
  return run.record(SPAN.skipped, { [A.round]: round, [A.parent]: parent, [A.reason]: reason });
}

export function recordRound(run: AlgorithmRun, state: SearchState, cost: Cost): Promise<void> {
  return run.record(SPAN.round, {
    [A.round]: state.round,
    [A.best]: state.best,
    [A.beam]: state.beam.join(','),
    [A.state]: JSON.stringify(state),
    [A.cost]: JSON.stringify(cost),
  });
}

export function recordBest(run: AlgorithmRun, best: Candidate, stopped: string): Promise<void> {
  return run.record(SPAN.best, {
    [A.version]: best.version,
    [A.resourcesId]: best.resourcesId,
    [A.score]: best.valScore,
    [A.stopped]: stopped,
  });
}

/** What a run recorded so far: its candidates with their latest scores, and its completed rounds. */
interface RecordedRun {
  readonly candidates: Map<string, Candidate>;
  readonly rounds: { state: SearchState; cost: Cost }[];
}

export async function readRun(run: AlgorithmRun): Promise<RecordedRun> {
  const candidates = new Map<string, Candidate>();
  for (const span of await run.read(SPAN.candidate)) {
    const a = span.attributes;
    const version = String(a[A.version]);
    const parent = text(a[A.parent]);
    const template = text(a[A.template]) ?? '';
    const component = String(a[A.promptResource]);
    candidates.set(version, {
      version,
      resourcesId: text(a[A.resourcesId]),
      component: parent === null ? null : component,
      template,
      // Runs recorded before several prompts kept the one template only.
      templates: a[A.templates] ? JSON.parse(String(a[A.templates])) : { [component]: template },
      parent,
      round: Number(a[A.round] ?? 0),
      critique: text(a[A.critique]),
      gradientScore: number(a[A.gradientScore]),
      rejected: text(a[A.reason]),
      batchScore: null,
      valScore: null,
      valRewards: null,
    });
  }
  for (const span of await run.read(SPAN.scores)) applyScores(candidates, span);
  const rounds = (await run.read(SPAN.round)).map((span) => ({
    state: JSON.parse(String(span.attributes[A.state])) as SearchState,
    cost: JSON.parse(String(span.attributes[A.cost])) as Cost,
  }));
  return { candidates, rounds };
}

function applyScores(candidates: Map<string, Candidate>, span: Span): void {
  const split = span.attributes[A.split];
  for (const { version, score, rewards } of JSON.parse(String(span.attributes[A.scores] ?? '[]')) as Score[]) {
    const candidate = candidates.get(version);
    if (!candidate || number(score) === null) continue;
    if (split === 'val_batch') candidate.batchScore = score;
    if (split === 'val') {
      candidate.valScore = score;
      // Runs recorded before per-task rewards were kept have none: no paired comparison then.
      candidate.valRewards = Array.isArray(rewards) ? rewards.map(number) : null;
    }
  }
}

const text = (value: unknown): string | null => (value === undefined || value === null ? null : String(value));
const number = (value: unknown): number | null => (typeof value === 'number' && Number.isFinite(value) ? value : null);
