import { JUDGE_FILE_ONLY, JUDGE_PATHS } from '../judge/options.js';
import type { AlgorithmCommand } from '../shared/command.js';
import { SFT, SftError, type SftResult } from './sft.js';
import { type SftOptionsInput, SFT_OPTIONS } from './options.js';
import { formatSftReport } from './report.js';

/**
 * `agl train sft`: SFT's options, made into the algorithm, and its report. The starting model is
 * the command's resources (--llm-model and --llm-endpoint, or `resources` in the config file),
 * the `llm` option of the file, or the store's latest `llm`; SFT says so when there is none.
 */
export const SFT_COMMAND: AlgorithmCommand<SftResult> = {
  summary: "rejection-sampling fine-tuning: your training command on the agent's best transcripts, each iteration",
  options: SFT_OPTIONS,
  paths: ['outDir', 'eval', ...JUDGE_PATHS],
  // The starting model's apiKey is inside `llm`, a config file key only.
  fileOnly: [...JUDGE_FILE_ONLY],
  // The options were checked with this schema (defaults filled in); SFT checks them once more.
  create: (options, context) =>
    new SFT({ ...(options as SftOptionsInput), resources: context.resources, log: context.log }),
  models: (result) => ({
    first: result.iterations[0]?.usedResourcesId ?? result.resourcesId,
    last: result.resourcesId,
  }),
  report: formatSftReport,
  explain: (error) => (error instanceof SftError ? error.message : undefined),
};
