import { allRows, type QuerySource } from '../../adapters/source.js';

/** What every search's cost holds besides its tokens, for one round or all of them. */
export interface SearchCost {
  rollouts: number;
  /** Wall-clock seconds. */
  seconds: number;
  /** Of those, waiting for rollouts. */
  rolloutSeconds: number;
  /** Of those, waiting for the search's models. */
  modelSeconds: number;
}

/** `total` plus `part`, field by field. */
export function addCost<C extends SearchCost>(total: C, part: C): void {
  for (const key of Object.keys(total) as (keyof C)[]) (total[key] as number) += part[key] as number;
}

/**
 * What a run spent as SQL counts it: its rollouts, their LLM calls (rows of llm_calls) and those
 * calls' tokens (input and output), whoever ran them; and its wall-clock seconds.
 */
export interface RunCost {
  readonly rollouts: number;
  readonly calls: number;
  readonly tokens: number;
  readonly seconds: number;
}

/** The cost of the round in flight, timed from its start. */
export class CostClock<C extends SearchCost> {
  cost: C;
  private started = 0;
  private calls = 0;
  private callsSince = 0;
  /** Whether the round in flight was lapped (recorded); a round a stop cut short was not. */
  private lapped = true;

  constructor(private readonly none: () => C) {
    this.cost = none();
  }

  /** A new round: nothing spent yet, seconds from now. */
  start(): void {
    this.cost = this.none();
    this.started = performance.now();
    this.lapped = false;
  }

  /** Model time counts while at least one call is in flight, so that calls at once are not counted twice. */
  async timed<R>(call: () => Promise<R>): Promise<R> {
    if (this.calls++ === 0) this.callsSince = performance.now();
    try {
      return await call();
    } finally {
      if (--this.calls === 0) this.cost.modelSeconds += (performance.now() - this.callsSince) / 1000;
    }
  }

  rolloutsRan(count: number, waitedSeconds: number): void {
    this.cost.rollouts += count;
    this.cost.rolloutSeconds += waitedSeconds;
  }

  /** The round's cost, its wall-clock seconds up to now. */
  lap(): C {
    this.cost.seconds = (performance.now() - this.started) / 1000;
    this.lapped = true;
    return this.cost;
  }

  /**
   * The cost of the round a stop cut short (a budget spent mid-round, a signal), lapped now; null
   * when every round was lapped or the cut one spent nothing. Its rollouts ran and count.
   */
  cutShort(): C | null {
    if (this.lapped) return null;
    const cost = this.lap();
    return cost.rollouts > 0 || cost.modelSeconds > 0 ? cost : null;
  }

  /** The sum of these costs. */
  total(parts: readonly C[]): C {
    const total = this.none();
    for (const part of parts) addCost(total, part);
    return total;
  }

  /**
   * The run's cost when it ends, the round in flight cut short (a stop's) included: its seconds
   * since the last start(), and what SQL counts over the rows of `rollouts` that `where` selects
   * (the run's, by their metadata), every session's and those a stop left unfinished.
   */
  async spent(source: QuerySource, where: string): Promise<RunCost> {
    this.cutShort();
    const [row] = await allRows(
      source,
      `WITH run AS (SELECT rollout_id FROM rollouts WHERE ${where})
       SELECT (SELECT count(*) FROM run)::INTEGER AS rollouts, count(*)::INTEGER AS calls,
         coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0)::DOUBLE AS tokens
       FROM llm_calls WHERE rollout_id IN (SELECT rollout_id FROM run)`,
    );
    return {
      rollouts: Number(row.rollouts),
      calls: Number(row.calls),
      tokens: Number(row.tokens),
      seconds: this.cost.seconds,
    };
  }
}

/** A clock for a run timed as one round (SFT, GRPO, eval), started now. */
export function runClock(): CostClock<SearchCost> {
  const clock = new CostClock(() => ({ rollouts: 0, seconds: 0, rolloutSeconds: 0, modelSeconds: 0 }));
  clock.start();
  return clock;
}

/** A run's cost as the reports print it. */
export const formatRunCost = (cost: RunCost) =>
  `cost: ${cost.rollouts} rollout${cost.rollouts === 1 ? '' : 's'}, ${cost.calls} LLM call${cost.calls === 1 ? '' : 's'}, ${cost.tokens} tokens, ${cost.seconds.toFixed(1)} s`;
