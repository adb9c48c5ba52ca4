import type { Algorithm, AlgorithmContext } from '../algorithm.js';
import { type APOOptionsInput, parseApoOptions } from './options.js';
import { checkJudgeOptions } from '../judge/options.js';
import { searchSettings, type SearchExtras } from '../shared/search.js';
import { Search, type APOResult, type ApoSearchSettings } from './search.js';

/** What APO takes besides its options: the resources to start from (a prompt_template among them) and a log. */
export type APOExtras = SearchExtras;

/**
 * Automatic prompt optimization: a beam search over prompt templates driven by textual
 * gradients (ProTeGi, as in Agent Lightning's APO). Each round, each parent in the beam is run on
 * training batches; a critic model reads those runs (transcripts and rewards) and says what to
 * change; an editor model rewrites the prompt from that critique; the new candidates and the
 * beam are scored on one validation batch and the best `beamWidth` are kept; the round's leader
 * is scored on the whole validation set and may become the best prompt.
 *
 * Every candidate is a resources version in the store, and the run records its decisions as
 * spans of its own rollout (the `prompt_versions` SQL view). At the end the best prompt becomes
 * the latest resources (and is written to `out`). A budget, a stop request (Ctrl-C: after the
 * evaluation in flight) or the last round end the search; `resume` continues it later.
 */
export class APO<T = unknown> implements Algorithm<T, APOResult> {
  readonly settings: ApoSearchSettings;

  constructor(options: APOOptionsInput & APOExtras = {}) {
    this.settings = searchSettings(parseApoOptions, options);
    checkJudgeOptions(this.settings);
  }

  async run(context: AlgorithmContext<T>): Promise<APOResult> {
    const search = await Search.open(this.settings, context);
    return search.search();
  }
}
