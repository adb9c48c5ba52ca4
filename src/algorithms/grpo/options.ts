import { z } from 'zod';
import { modelVersion } from '../../api/requests.js';
import { JUDGE_OPTIONS } from '../judge/options.js';
import { EVAL_TASKS, parseOptions, START_MODEL } from '../shared/options.js';

/**
 * The options of the GRPO algorithm, as TypeScript, a config file or a command line gives them:
 * one schema checks them all and fills in the defaults. docs/training.md explains each.
 */

export const ESTIMATORS = ['grpo', 'dr_grpo', 'rloo', 'none'] as const;
export type Estimator = (typeof ESTIMATORS)[number];

export const GRPO_OPTIONS = z
  .strictObject({
    steps: z.number().int().min(1).default(10).describe('training steps: batches handed to the trainer'),
    batchSize: z.number().int().min(1).default(8).describe('training tasks per step, each a group'),
    groupSize: z.number().int().min(1).default(4).describe('rollouts per task: the G of GRPO'),
    minGroups: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe('usable groups a batch needs; a step with fewer runs more tasks (default: batchSize)'),
    maxTopUps: z
      .number()
      .int()
      .min(0)
      .default(3)
      .describe('rounds of extra tasks a step may run to reach minGroups before it fails'),
    estimator: z
      .enum(ESTIMATORS)
      .default('grpo')
      .describe('advantages: grpo (r-mean)/(std+eps), dr_grpo r-mean, rloo leave-one-out, none (rewards only)'),
    epsilon: z.number().positive().default(1e-6).describe('added to the std of grpo'),
    rolloutLevel: z
      .boolean()
      .default(false)
      .describe('one advantage per rollout (from its final reward), shared by its rows, instead of one per row'),
    aggregation: z
      .enum(['transition', 'trajectory'])
      .default('transition')
      .describe('transition: a row per LLM call; trajectory: continuing calls merged into one row'),
    credit: z
      .enum(['final', 'step', 'discounted'])
      .default('final')
      .describe("a row's reward: the rollout's final one, its step's, or the discounted return"),
    gamma: z.number().min(0).max(1).default(1).describe('discount of discounted credit'),
    agentMatch: z
      .string()
      .min(1)
      .superRefine(isRegExp)
      .optional()
      .describe(
        "train only calls of agents whose name matches this regex (others: left out, or trajectory's masked context)",
      ),
    maxPromptLength: z.number().int().min(1).optional().describe('longest prompt of a row, in tokens'),
    maxResponseLength: z.number().int().min(1).optional().describe('longest response of a row, in tokens'),
    overlong: z
      .enum(['drop', 'truncate'])
      .default('drop')
      .describe('a rollout with a row over a length limit: dropped, or its rows truncated'),
    missingReward: z
      .number()
      .optional()
      .describe('the reward of a rollout that gave none (default: such rollouts are dropped)'),
    maxStaleness: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('model versions a row may lag behind the trainer; 1 or more runs the next rollouts while it trains'),
    modelVersion: modelVersion.default('0').describe('the version of the starting model'),
    logprobs: z
      .boolean()
      .default(true)
      .describe(
        "ask the model server for the sampled tokens' logprobs (logprobs: true in the llm's sampling parameters)",
      ),
    leaseSeconds: z
      .number()
      .positive()
      .default(600)
      .describe('a batch the trainer pulled and did not end within this is handed out again'),
    batchesDir: z
      .string()
      .min(1)
      .optional()
      .describe('hand batches over as Parquet files in this folder, instead of over HTTP'),
    seed: z.number().int().default(0).describe('seed of the order tasks are taken in'),
    eval: EVAL_TASKS,
    llm: START_MODEL.optional().describe(
      "the starting model (default: the `llm` resource of the store's latest resources)",
    ),
    rolloutTimeoutSeconds: z
      .number()
      .positive()
      .optional()
      .describe('each rollout times out after this (default: no limit)'),
    quiet: z.boolean().default(false).describe('no progress lines on stderr'),
    ...JUDGE_OPTIONS,
  })
  .describe('GRPO: group-relative policy optimization, batches handed to an external trainer');

/** The options as given (defaults may be left out). */
export type GrpoOptionsInput = z.input<typeof GRPO_OPTIONS>;
/** The options checked, defaults filled in. */
export type GrpoOptions = z.output<typeof GRPO_OPTIONS>;

/** Checks `options` and fills in the defaults; an OptionsError names every option that is wrong. */
export function parseGrpoOptions(options: unknown): GrpoOptions {
  return parseOptions(GRPO_OPTIONS, options, 'GRPO');
}

/** A check that a text is a regular expression, as zod issues it (the option error names the option). */
function isRegExp(text: string, context: z.RefinementCtx): void {
  try {
    new RegExp(text);
  } catch (error) {
    context.addIssue({ code: 'custom', message: `a regular expression (${(error as Error).message})` });
  }
}
