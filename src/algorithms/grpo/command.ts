import { JUDGE_FILE_ONLY, JUDGE_PATHS } from '../judge/options.js';
import type { AlgorithmCommand } from '../shared/command.js';
import { GRPO, GrpoError, type GrpoResult } from './grpo.js';
import { type GrpoOptionsInput, GRPO_OPTIONS } from './options.js';
import { formatGrpoReport } from './report.js';

/**
 * `agl train grpo`: GRPO's options, made into the algorithm, and its report. The starting model
 * is the command's resources (--llm-model and --llm-endpoint, or `resources` in the config file),
 * the `llm` option of the file, or the store's latest `llm`. The trainer pulls batches from the
 * server this command starts (`--port` fixes its port) or reads them from `--batches-dir`.
 */
export const GRPO_COMMAND: AlgorithmCommand<GrpoResult> = {
  summary: 'group-relative policy optimization: token-level batches with advantages for your trainer (HTTP or files)',
  options: GRPO_OPTIONS,
  paths: ['batchesDir', 'eval', ...JUDGE_PATHS],
  // The starting model's apiKey is inside `llm`, a config file key only.
  fileOnly: [...JUDGE_FILE_ONLY],
  create: (options, context) =>
    new GRPO({ ...(options as GrpoOptionsInput), resources: context.resources, log: context.log }),
  models: (result) => ({ first: result.firstResourcesId, last: result.resourcesId }),
  report: formatGrpoReport,
  explain: (error) => (error instanceof GrpoError ? error.message : undefined),
};
