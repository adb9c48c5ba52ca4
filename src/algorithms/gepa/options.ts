import { z } from 'zod';
import { parseSearchOptions, searchOptions } from '../shared/options.js';

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
  out: z
    .string()
    .min(1)
    .optional()
    .describe('file the best prompts are written to, as JSON (resource name -> template)'),
  ...searchOptions({
    name: 'GEPA',
    models: 'the reflection model',
    possessive: 'its',
    call: 'reflection',
    tokens: 'reflection',
  }),
});

/** The options as given (anything with a default may be left out). */
export type GEPAOptionsInput = z.input<typeof GEPA_OPTIONS>;
/** The options with their defaults filled in. */
export type GEPASettings = z.output<typeof GEPA_OPTIONS>;

/** The options a user gave, checked, with defaults; the reflection model's endpoint from the environment when not given. */
export const parseGepaOptions = (input: unknown): GEPASettings & { baseURL: string } =>
  parseSearchOptions(GEPA_OPTIONS, input, 'GEPA');
