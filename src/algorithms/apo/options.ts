import { z } from 'zod';
import { JUDGE_OPTIONS } from '../judge/options.js';
import { parseOptions } from '../shared/options.js';

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
  criticApi: z
    .enum(['openai', 'anthropic'])
    .default('openai')
    .describe("the API critic and editor speak: OpenAI's chat completions or Anthropic's Messages"),
  baseURL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe(
      'endpoint of critic and editor (default: OPENAI_BASE_URL, else OpenAI; with criticApi anthropic, ANTHROPIC_BASE_URL, else Anthropic)',
    ),
  apiKey: z
    .string()
    .optional()
    .describe('their API key (default: OPENAI_API_KEY, or ANTHROPIC_API_KEY); config file only, never a flag'),
  temperature: z.number().min(0).max(2).default(1).describe('sampling temperature of critic and editor'),
  seed: z
    .int()
    .default(0)
    .describe('seed of every random choice: the same seed, data and answers give the same search'),
  maxRollouts: z
    .int()
    .min(1)
    .optional()
    .describe('budget: rollouts in all; the search ends before an evaluation that would pass it'),
  maxTokens: z
    .int()
    .min(1)
    .optional()
    .describe('budget: critic and editor tokens in all; no call starts once it is spent'),
  concurrency: z.int().min(1).default(4).describe('critic and editor calls at once'),
  rolloutTimeoutSeconds: z.number().positive().default(600).describe('a rollout running longer fails (scored 0)'),
  requestTimeoutSeconds: z.number().positive().default(120).describe('one critic or editor call'),
  retries: z.int().min(0).default(3).describe('retries of a failed critic or editor call, with backoff'),
  retryBackoffSeconds: z.number().min(0).default(1).describe('the first wait before a retry; it doubles'),
  promptResource: z
    .array(z.string().min(1))
    .min(1)
    .optional()
    .describe(
      'the prompt_template resources to optimize, one edit changing one of them in turn (default: the only one)',
    ),
  out: z.string().min(1).optional().describe('file the best prompt is written to'),
  resume: z.boolean().default(false).describe('continue the latest APO run in the store'),
  resumeRun: z.string().min(1).optional().describe('continue this APO run (its rollout id)'),
  ...JUDGE_OPTIONS,
});

/** The options as given (anything with a default may be left out). */
export type APOOptionsInput = z.input<typeof APO_OPTIONS>;
/** The options with their defaults filled in. */
export type APOSettings = z.output<typeof APO_OPTIONS>;

/** The options a user gave, checked, with defaults; the critic's endpoint from the environment when not given. */
export function parseApoOptions(input: unknown): APOSettings & { baseURL: string } {
  const settings = parseOptions(APO_OPTIONS, input, 'APO');
  const anthropic = settings.criticApi === 'anthropic';
  return {
    ...settings,
    baseURL:
      settings.baseURL ??
      (anthropic
        ? (process.env.ANTHROPIC_BASE_URL ?? 'https://api.anthropic.com')
        : (process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1')),
    apiKey: settings.apiKey ?? (anthropic ? process.env.ANTHROPIC_API_KEY : process.env.OPENAI_API_KEY),
  };
}
