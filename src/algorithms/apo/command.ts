import { APO } from './apo.js';
import { APO_OPTIONS } from './options.js';
import { formatApoReport } from './report.js';
import type { APOResult } from './search.js';
import type { AlgorithmCommand } from '../shared/command.js';
import { JUDGE_FILE_ONLY, JUDGE_PATHS } from '../judge/options.js';

/** `agl train apo`: APO's options, made into the algorithm, and its report. */
export const APO_COMMAND: AlgorithmCommand<APOResult> = {
  summary: 'automatic prompt optimization: a beam search over the prompt template, driven by critiques of its runs',
  options: APO_OPTIONS,
  paths: ['out', ...JUDGE_PATHS],
  fileOnly: ['apiKey', ...JUDGE_FILE_ONLY],
  create: (options, context) => new APO({ ...options, resources: context.resources, log: context.log }),
  report: formatApoReport,
};
