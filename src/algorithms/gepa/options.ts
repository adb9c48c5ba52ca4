import { z } from 'zod';
import { parseOptions } from '../shared/options.js';

/**
 * GEPA's options: one schema for the TypeScript API, `agl train gepa` flags and config files
 * (each key is also a flag: minibatchSize is --minibatch-size). Defaults follow DSPy's GEPA
 * where it has one (minibatch of 3, merges on, at most 5).
 */
export const GEPA_OPTIONS = z.strictObject({
  iterations: z.int().min(0).default(20).describe('proposals (reflective mutations and merges) at most'),
  minibatchSize: z.int().min(1).default(3).describe('training tasks one reflection reads and one proposal is tried on'),
  componentSelection: z
    .enum(['round_robin', 'blame'])
    .default('round_robin')
    .describe('which prompt a mutation changes: each in turn, or the one the feedback names most'),
  merge: z.boolean().default(true).describe('merge two candidates whose lineages changed different prompts'),
  maxMerges: z.int().min(0).default(5).describe('merges tried at most'),
  patience: z
    .int()
    .min(1)
    .default(8)
    .describe('the search ends after this many proposals in a row leave the Pareto frontier as it was'),
  reflectionModel: z
    .string()
    .min(1)
    .default('gpt-4.1-mini')
    .describe('the model that reflects on runs and rewrites a prompt'),
  baseURL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe('OpenAI-compatible endpoint of the reflection model (default: OPENAI_BASE_URL, else OpenAI)'),
  apiKey: z.string().optional().describe('its API key (default: OPENAI_API_KEY); config file only, never a flag'),
  temperature: z.number().min(0).max(2).default(1).describe('sampling temperature of the reflection model'),
  seed: z
    .int()
    .default(0)
    .describe('seed of every random choice: the same seed, data and answers give the same search'),
  maxRollouts: z
    .int()
    .min(1)
    .optional()
    .describe('budget: rollouts in all; the search ends before an evaluation that would pass it'),
  maxTokens: z.int().min(1).optional().describe('budget: reflection tokens in all; no call starts once it is spent'),
  rolloutTimeoutSeconds: z.number().positive().default(600).describe('a rollout running longer fails (scored 0)'),
  requestTimeoutSeconds: z.number().positive().default(120).describe('one reflection call'),
  retries: z.int().min(0).default(3).describe('retries of a failed reflection call, with backoff'),
  retryBackoffSeconds: z.number().min(0).default(1).describe('the first wait before a retry; it doubles'),
  out: z
    .string()
    .min(1)
    .optional()
    .describe('file the best prompts are written to, as JSON (resource name -> template)'),
  resume: z.boolean().default(false).describe('continue the latest GEPA run in the store'),
  resumeRun: z.string().min(1).optional().describe('continue this GEPA run (its rollout id)'),
});

/** The options as given (anything with a default may be left out). */
export type GEPAOptionsInput = z.input<typeof GEPA_OPTIONS>;
/** The options with their defaults filled in. */
export type GEPASettings = z.output<typeof GEPA_OPTIONS>;

/** The options a user gave, checked, with defaults; the reflection model's endpoint from the environment when not given. */
export function parseGepaOptions(input: unknown): GEPASettings & { baseURL: string } {
  const settings = parseOptions(GEPA_OPTIONS, input, 'GEPA');
  return {
    ...settings,
    baseURL: settings.baseURL ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
    apiKey: settings.apiKey ?? process.env.OPENAI_API_KEY,
  };
}
