// Evaluation: variants run over the same tasks and compared with honest intervals (docs/evaluation.md).
export { Evaluation } from './evaluation.js';
export {
  EVAL_OPTIONS,
  VARIANT,
  parseEvalOptions,
  type EvalOptionsInput,
  type EvalSettings,
  type EvalVariant,
} from './options.js';
export type { EvalResult, PairSummary, TaskChange, TaskSummary, VariantSummary } from './summary.js';
export { formatDifference, formatEvalReport } from './report.js';
export {
  bootstrapMean,
  pairedDifference,
  wilsonInterval,
  type Interval,
  type MeanEstimate,
  type PairedDifference,
  type StatisticsOptions,
  type TaskScores,
} from './statistics.js';
