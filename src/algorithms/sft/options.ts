import { z } from 'zod';
import { JUDGE_OPTIONS } from '../judge/options.js';
import { EVAL_TASKS, parseOptions, START_MODEL } from '../shared/options.js';

/**
 * The options of the SFT algorithm, as TypeScript, a config file or a command line gives them:
 * one schema checks them all and fills in the defaults. docs/algorithms.md ("SFT") explains each.
 */

/** The placeholders of `trainCmd`, `endpointTemplate` and `modelTemplate`. */
export const SFT_PLACEHOLDERS = ['dataset', 'output', 'iteration', 'model', 'endpoint', 'records', 'format'] as const;
export type SftPlaceholder = (typeof SFT_PLACEHOLDERS)[number];

export const SFT_OPTIONS = z
  .strictObject({
    trainCmd: z
      .string()
      .min(1)
      .describe(
        'the training command, run by /bin/sh; {dataset} {output} {iteration} {model} {endpoint} {records} {format} are substituted, shell-quoted',
      ),
    iterations: z.number().int().min(1).default(2).describe('rounds of rollouts, selection, training and publishing'),
    samplesPerTask: z
      .number()
      .int()
      .min(1)
      .default(4)
      .describe('rollouts of each training task per iteration: the n of best-of-n'),
    topFraction: z
      .number()
      .gt(0)
      .max(1)
      .default(0.25)
      .describe("keep each task's best rollouts: this fraction of its samples, rounded up (0.25 of 4: the best one)"),
    threshold: z
      .number()
      .optional()
      .describe('keep only rollouts whose final reward is at least this (default: no floor)'),
    format: z
      .enum(['jsonl', 'parquet'])
      .default('jsonl')
      .describe('jsonl: OpenAI chat records; parquet: token-level rows'),
    outDir: z
      .string()
      .min(1)
      .default('sft')
      .describe('where iteration-N/ folders (dataset, training log, {output}) go'),
    eval: EVAL_TASKS,
    llm: START_MODEL.optional().describe(
      "the starting model (default: the `llm` resource of the store's latest resources)",
    ),
    endpointTemplate: z
      .string()
      .min(1)
      .default('{endpoint}')
      .describe(
        'endpoint of the trained model when the command prints no AGL_MODEL_ENDPOINT= line (the default keeps the server)',
      ),
    modelTemplate: z
      .string()
      .min(1)
      .default('{output}')
      .describe(
        'name of the trained model when the command prints no AGL_MODEL_NAME= line (the default: the name vLLM serves the {output} folder under)',
      ),
    rolloutTimeoutSeconds: z
      .number()
      .positive()
      .optional()
      .describe('each rollout times out after this (default: no limit)'),
    trainTimeoutSeconds: z
      .number()
      .positive()
      .optional()
      .describe('the training command is stopped after this, and the loop with it (default: no limit)'),
    killGraceSeconds: z
      .number()
      .min(0)
      .default(10)
      .describe('seconds between SIGTERM and SIGKILL when the command is stopped'),
    quiet: z
      .boolean()
      .default(false)
      .describe("do not echo the training command's output and progress lines to stderr"),
    ...JUDGE_OPTIONS,
  })
  .describe('SFT: rejection-sampling fine-tuning');

/** The options as given (defaults may be left out). */
export type SftOptionsInput = z.input<typeof SFT_OPTIONS>;
/** The options checked, defaults filled in. */
export type SftOptions = z.output<typeof SFT_OPTIONS>;

/** Checks `options` and fills in the defaults; an OptionsError names every option that is wrong. */
export function parseSftOptions(options: unknown): SftOptions {
  return parseOptions(SFT_OPTIONS, options, 'SFT');
}
