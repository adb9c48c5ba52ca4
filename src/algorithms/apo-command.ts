import { APO } from './apo.js';
import { APO_OPTIONS } from './apo-options.js';
import { formatApoReport } from './apo-report.js';
import type { APOResult } from './apo-search.js';
import type { AlgorithmCommand } from './command.js';

/** `agl train apo`: APO's options, made into the algorithm, and its report. */
export const APO_COMMAND: AlgorithmCommand<APOResult> = {
  summary: 'automatic prompt optimization: a beam search over the prompt template, driven by critiques of its runs',
  options: APO_OPTIONS,
  paths: ['out'],
  fileOnly: ['apiKey'],
  create: (options, context) => new APO({ ...options, resources: context.resources, log: context.log }),
  report: formatApoReport,
};
