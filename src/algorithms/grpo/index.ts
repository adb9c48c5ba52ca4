// GRPO: group-relative policy optimization, token-level batches handed to an external trainer.
export { GRPO, GrpoError, grpoFromOptions, type GrpoExtras, type GrpoResult } from './grpo.js';
export {
  GRPO_OPTIONS,
  parseGrpoOptions,
  ESTIMATORS,
  type Estimator,
  type GrpoOptions,
  type GrpoOptionsInput,
} from './options.js';
export type { StepRecord, StepStatus } from './record.js';
export { groupAdvantages, computeAdvantages } from './advantages.js';
export { formatGrpoReport } from './report.js';
export { GRPO_COMMAND } from './command.js';
