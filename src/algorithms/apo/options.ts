import { z } from 'zod';
import { JUDGE_OPTIONS } from '../judge/options.js';
import { parseSearchOptions, searchOptions } from '../shared/options.js';

/**
 * APO's options: one schema for the TypeScript API, `agl train apo` flags and config files
 * (each key is also a flag: beamWidth is --beam-width). Defaults follow Agent Lightning's APO.
 */
export const APO_OPTIONS = z.strictObject({
  beamWidth: z.int().min(1).default(4).describe('prompts kept after each round'),
  branchFactor: z.int().min(1).default(4).describe('new candidates asked for per parent and round'),
  rounds: z.int().min(0).default(3).describe('rounds of the beam search'),
  gradientBatchSize: z.int().min(1).default(4).describe('training tasks whose runs one critique reads'),
  valBatchSize: z.int().min(1).default(16).describe('validation tasks each round scores its candidates on'),
  criticModel: z.string().min(1).default('gpt-4.1-mini').describe('the model that critiques a prompt from its runs'),
  editorModel: z.string().min(1).default('gpt-4.1-mini').describe('the model that rewrites a prompt from a critique'),
  concurrency: z.int().min(1).default(4).describe('critic and editor calls at once'),
  promptResource: z
    .array(z.string().min(1))
    .min(1)
    .optional()
    .describe(
      'the prompt_template resources to optimize, one edit changing one of them in turn (default: the only one)',
    ),
  out: z.string().min(1).optional().describe('file the best prompt is written to'),
  ...searchOptions({
    name: 'APO',
    models: 'critic and editor',
    possessive: 'their',
    call: 'critic or editor',
    tokens: 'critic and editor',
  }),
  ...JUDGE_OPTIONS,
});

/** The options as given (anything with a default may be left out). */
export type APOOptionsInput = z.input<typeof APO_OPTIONS>;
/** The options with their defaults filled in. */
export type APOSettings = z.output<typeof APO_OPTIONS>;

/** The options a user gave, checked, with defaults; the critic's endpoint from the environment when not given. */
export const parseApoOptions = (input: unknown): APOSettings & { baseURL: string } =>
  parseSearchOptions(APO_OPTIONS, input, 'APO');
