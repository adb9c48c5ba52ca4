import { GEPA } from './gepa.js';
import { GEPA_OPTIONS } from './options.js';
import { formatGepaReport } from './report.js';
import type { GEPAResult } from './search.js';
import type { AlgorithmCommand } from '../shared/command.js';

/** `agl train gepa`: GEPA's options, made into the algorithm, and its report. */
export const GEPA_COMMAND: AlgorithmCommand<GEPAResult> = {
  summary:
    'reflective prompt evolution: a Pareto frontier of candidates over every prompt template, mutated from feedback',
  options: GEPA_OPTIONS,
  paths: ['out'],
  fileOnly: ['apiKey'],
  create: (options, context) => new GEPA({ ...options, resources: context.resources, log: context.log }),
  report: formatGepaReport,
};
