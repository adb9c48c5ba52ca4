import type { Algorithm, AlgorithmContext } from '../algorithm.js';
import { type GEPAOptionsInput, parseGepaOptions } from './options.js';
import { searchSettings, type SearchExtras } from '../shared/search.js';
import { GepaSearch, type GEPAResult, type GepaSearchSettings } from './search.js';

/** What GEPA takes besides its options: the resources to start from (every prompt_template among them is evolved) and a log. */
export type GEPAExtras = SearchExtras;

/**
 * GEPA, reflective prompt evolution (Agrawal et al., 2025): a pool of candidates (one template per
 * prompt_template resource) with a score per validation task. Each iteration draws a parent from
 * the Pareto frontier (candidates best on some task, by how many), runs it on a training
 * minibatch, has a reflection model rewrite one component from those runs' transcripts, rewards
 * and feedback, and keeps the rewrite when it does better on the same minibatch; kept candidates
 * are scored on every validation task. After a kept mutation it tries to merge two frontier
 * candidates whose lineages changed different components. It stops on its iterations, a budget,
 * or when the frontier stops moving; every candidate is a resources version and its decisions
 * are spans of the run (`prompt_versions`).
 */
export class GEPA<T = unknown> implements Algorithm<T, GEPAResult> {
  readonly settings: GepaSearchSettings;

  constructor(options: GEPAOptionsInput & GEPAExtras = {}) {
    this.settings = searchSettings(parseGepaOptions, options);
  }

  async run(context: AlgorithmContext<T>): Promise<GEPAResult> {
    const search = await GepaSearch.open(this.settings, context);
    return search.search();
  }
}
