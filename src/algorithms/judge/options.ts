import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { JudgeSettings } from './judge.js';

/**
 * The judge options GRPO, SFT and APO share (`agl train ... --judge rubric.md --judge-model M`):
 * with `judge` given, the rollouts that bring no reward of their own are scored by an LLM judge
 * (rollouts.ts). The endpoint and key default to OPENAI_BASE_URL and OPENAI_API_KEY.
 */
export const JUDGE_OPTIONS = {
  judge: z.string().min(1).optional().describe('rubric file: an LLM judge scores the rollouts that bring no reward'),
  judgeModel: z.string().min(1).optional().describe('the judge model (needed with --judge)'),
  judgeEndpoint: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe("the judge's OpenAI-compatible endpoint (default: OPENAI_BASE_URL, else OpenAI)"),
  judgeApiKey: z.string().optional().describe("the judge's API key (default: OPENAI_API_KEY); config file only"),
  judgeRetries: z.int().min(0).default(2).describe('retries of a judge call that failed or answered nonsense'),
};

/** The options' keys that name files, and those that are secrets (no flags). */
export const JUDGE_PATHS = ['judge'] as const;
export const JUDGE_FILE_ONLY = ['judgeApiKey'] as const;

export interface JudgeOptions {
  readonly judge?: string;
  readonly judgeModel?: string;
  readonly judgeEndpoint?: string;
  readonly judgeApiKey?: string;
  readonly judgeRetries: number;
}

/** A judge's model without its rubric: a TypeError says what is missing. */
export function checkJudgeOptions(options: JudgeOptions): void {
  if (options.judge !== undefined && options.judgeModel === undefined)
    throw new TypeError('judge needs judgeModel (--judge-model): the model that scores by the rubric');
  if (options.judge === undefined && options.judgeModel !== undefined)
    throw new TypeError('judgeModel needs judge (--judge): the rubric file the judge scores by');
}

/** The judge's settings, the rubric read from its file; undefined when no judge is asked for. */
export async function judgeSettingsOf(options: JudgeOptions): Promise<JudgeSettings | undefined> {
  if (options.judge === undefined || options.judgeModel === undefined) return undefined;
  let rubric: string;
  try {
    rubric = (await readFile(options.judge, 'utf8')).trim();
  } catch (error) {
    throw new TypeError(`judge rubric ${options.judge}: ${(error as Error).message}`);
  }
  if (rubric === '') throw new TypeError(`judge rubric ${options.judge} is empty`);
  return {
    rubric,
    model: options.judgeModel,
    endpoint: options.judgeEndpoint ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
    apiKey: options.judgeApiKey ?? process.env.OPENAI_API_KEY,
    retries: options.judgeRetries,
  };
}
