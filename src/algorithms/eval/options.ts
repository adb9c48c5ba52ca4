import { z } from 'zod';
import { parseOptions } from '../shared/options.js';

/**
 * What an evaluation runs: a variant is the resources the agent gets. `resources` picks a stored
 * version (its id, `latest`, or `best`: the best prompt of the latest APO run); `prompt` and `llm`
 * override its `prompt_template` and `llm` resources. With neither, the latest resources.
 */
export const VARIANT = z.strictObject({
  name: z.string().min(1).describe('the name reports use'),
  resources: z.string().min(1).optional().describe('a resources id, latest, or best (of the latest APO run)'),
  prompt: z.string().optional().describe('the prompt_template to run, e.g. "Answer: {question}"'),
  llmModel: z.string().min(1).optional().describe("the agent's model (its llm resource)"),
  llmEndpoint: z.url().optional().describe('its OpenAI-compatible endpoint'),
});

export type EvalVariant = z.output<typeof VARIANT>;

/** An evaluation's options: one schema for the TypeScript API, `agl eval` flags and config files. */
export const EVAL_OPTIONS = z.strictObject({
  variants: z.array(VARIANT).min(1).describe('what to compare (the first is the baseline of the differences)'),
  samples: z.int().min(1).default(1).describe('runs of every task by every variant'),
  seed: z.int().default(0).describe('seed of the order of the runs and of the intervals'),
  rolloutTimeoutSeconds: z.number().positive().default(600).describe('a rollout running longer fails'),
  maxRollouts: z
    .int()
    .min(1)
    .optional()
    .describe('budget: rollouts in all; an evaluation that needs more is refused before it starts'),
});

export type EvalOptionsInput = z.input<typeof EVAL_OPTIONS>;
export type EvalSettings = z.output<typeof EVAL_OPTIONS>;

/** The options a user gave, checked, with defaults; variant names must differ. */
export function parseEvalOptions(input: unknown): EvalSettings {
  const settings = parseOptions(EVAL_OPTIONS, input, 'evaluation');
  const names = settings.variants.map((v) => v.name);
  const twice = names.find((name, i) => names.indexOf(name) !== i);
  if (twice !== undefined) throw new TypeError(`two variants are named "${twice}": give each its own name`);
  return settings;
}
