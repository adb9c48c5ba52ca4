import type { Random } from '../shared/random.js';

/**
 * GEPA's choices over its candidate pool, pure functions of the per-task validation scores and
 * the lineage: which candidates make the Pareto frontier, which one to evolve next, and which
 * two to merge.
 */

/** What the choices read of a candidate of the pool. */
export interface PoolEntry {
  readonly version: string;
  readonly parents: readonly string[];
  /** Component name -> template. */
  readonly templates: Readonly<Record<string, string>>;
  /** One score per validation task, in task order. */
  readonly valScores: readonly number[];
}

const mean = (values: readonly number[]) => values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);

/**
 * The Pareto frontier: the candidates best (ties included) on at least one task, less those
 * dominated (every task one is best on, another kept candidate is best on too), each with the
 * number of tasks it is best on, in pool order. Of candidates best on the same tasks, the one
 * with the higher mean (then the older one) stays.
 */
export function paretoFrontier(pool: readonly PoolEntry[]): Map<string, number> {
  const tasks = pool[0]?.valScores.length ?? 0;
  const wins = new Map<string, Set<number>>(pool.map((c) => [c.version, new Set<number>()]));
  for (let task = 0; task < tasks; task++) {
    const top = Math.max(...pool.map((c) => c.valScores[task]));
    for (const c of pool) if (c.valScores[task] === top) wins.get(c.version)?.add(task);
  }
  const order = pool
    .map((c, index) => ({ c, index, won: wins.get(c.version) ?? new Set<number>() }))
    .filter((e) => e.won.size > 0)
    .sort((x, y) => x.won.size - y.won.size || mean(x.c.valScores) - mean(y.c.valScores) || y.index - x.index);
  const kept = new Set(order.map((e) => e.c.version));
  for (const { c, won } of order) {
    const dominated = [...kept].some(
      (other) => other !== c.version && [...won].every((task) => wins.get(other)?.has(task)),
    );
    if (dominated) kept.delete(c.version);
  }
  return new Map(pool.filter((c) => kept.has(c.version)).map((c) => [c.version, wins.get(c.version)?.size ?? 0]));
}

/** A frontier candidate, drawn with a chance proportional to the tasks it is best on. */
export function sampleFrontier(frontier: ReadonlyMap<string, number>, random: Random): string {
  const total = [...frontier.values()].reduce((s, w) => s + w, 0);
  let draw = random.next() * total;
  for (const [version, weight] of frontier) {
    draw -= weight;
    if (draw < 0) return version;
  }
  return [...frontier.keys()].at(-1) as string;
}

/** Every ancestor of a version (itself left out). */
export function ancestorsOf(version: string, parentsOf: (version: string) => readonly string[]): Set<string> {
  const seen = new Set<string>();
  const stack = [...parentsOf(version)];
  while (stack.length) {
    const next = stack.pop() as string;
    if (!seen.has(next)) {
      seen.add(next);
      stack.push(...parentsOf(next));
    }
  }
  return seen;
}

/** A merge to try: two frontier candidates, their common ancestor and the templates they combine into. */
export interface MergePlan {
  readonly parents: readonly [string, string];
  readonly ancestor: string;
  readonly templates: Record<string, string>;
  /** The components each side gave: what changed from the ancestor on its lineage. */
  readonly from: Readonly<Record<string, string>>;
}

/**
 * A merge of two frontier candidates whose lineages changed different components since a common
 * ancestor that scores no higher than either: each component from the side that changed it. On a
 * component both changed, the higher-scoring side's. Pairs already tried (`tried`, as "a+b") and
 * merges that equal one side are left out; of the rest one is drawn. Null when there is none.
 */
export function planMerge(
  pool: readonly PoolEntry[],
  frontier: ReadonlyMap<string, number>,
  tried: ReadonlySet<string>,
  random: Random,
): MergePlan | null {
  const byVersion = new Map(pool.map((c) => [c.version, c]));
  const parentsOf = (v: string) => byVersion.get(v)?.parents ?? [];
  const candidates = [...frontier.keys()];
  const plans: MergePlan[] = [];
  for (let i = 0; i < candidates.length; i++) {
    for (let j = i + 1; j < candidates.length; j++) {
      const [a, b] = [byVersion.get(candidates[i]), byVersion.get(candidates[j])];
      if (!a || !b || tried.has(pairKey(a.version, b.version))) continue;
      const plan = mergeOf(a, b, byVersion, parentsOf);
      if (plan) plans.push(plan);
    }
  }
  return plans.length ? plans[random.below(plans.length)] : null;
}

export const pairKey = (a: string, b: string) => [a, b].sort().join('+');

function mergeOf(
  a: PoolEntry,
  b: PoolEntry,
  byVersion: ReadonlyMap<string, PoolEntry>,
  parentsOf: (v: string) => readonly string[],
): MergePlan | null {
  const [ofA, ofB] = [ancestorsOf(a.version, parentsOf), ancestorsOf(b.version, parentsOf)];
  if (ofA.has(b.version) || ofB.has(a.version)) return null;
  // The most recent common ancestor: the latest in the pool.
  const ancestor = [...byVersion.values()].filter((c) => ofA.has(c.version) && ofB.has(c.version)).at(-1);
  if (!ancestor || mean(ancestor.valScores) > Math.min(mean(a.valScores), mean(b.valScores))) return null;
  const templates: Record<string, string> = {};
  const from: Record<string, string> = {};
  const aLeads = mean(a.valScores) >= mean(b.valScores);
  for (const [name, base] of Object.entries(ancestor.templates)) {
    const [changedA, changedB] = [a.templates[name] !== base, b.templates[name] !== base];
    const side = changedA && changedB ? (aLeads ? a : b) : changedB ? b : a;
    templates[name] = side.templates[name];
    if (changedA || changedB) from[name] = side.version;
  }
  const same = (c: PoolEntry) => Object.entries(templates).every(([name, t]) => c.templates[name] === t);
  if (same(a) || same(b)) return null;
  return { parents: [a.version, b.version], ancestor: ancestor.version, templates, from };
}
