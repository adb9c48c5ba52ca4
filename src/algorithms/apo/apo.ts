import type { NamedResources } from '../../api/types.js';
import type { Algorithm, AlgorithmContext } from '../algorithm.js';
import { type APOOptionsInput, parseApoOptions } from './options.js';
import { checkJudgeOptions } from '../judge/options.js';
import { Search, type APOResult, type SearchSettings } from './search.js';

/** What APO takes besides its options (which a config file can hold too). */
export interface APOExtras {
  /** The resources to start from, a prompt_template among them; default: the store's latest. */
  readonly resources?: NamedResources;
  /** Where progress lines go (default: stderr). */
  readonly log?: (line: string) => void;
}

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
  readonly settings: SearchSettings;

  constructor(options: APOOptionsInput & APOExtras = {}) {
    const { resources, log, ...rest } = options;
    this.settings = { ...parseApoOptions(rest), resources, log: log ?? ((line) => console.error(line)) };
    checkJudgeOptions(this.settings);
  }

  async run(context: AlgorithmContext<T>): Promise<APOResult> {
    const search = await Search.open(this.settings, context);
    return search.search();
  }
}
