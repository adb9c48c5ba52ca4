// `agl/algorithms`: what improves an agent (Baseline, APO, SFT, GRPO) and what `agl train` needs of
// an algorithm. They run against any LightningStore; the Trainer that hosts one is `agl/trainer`.
export { finalRewards, type Algorithm, type AlgorithmContext, type RolloutOutcome } from './algorithms/algorithm.js';
export { Baseline, type BaselineResult } from './algorithms/baseline.js';
export {
  APO,
  APO_OPTIONS,
  type APOExtras,
  type APOOptionsInput,
  type APOResult,
  type APOSettings,
  type Candidate,
  type Cost,
  type StopKind,
} from './algorithms/apo.js';
export { SFT, SftError, sftFromOptions, type SftExtras, type SftResult } from './algorithms/sft.js';
export {
  sftOptionsSchema,
  parseSftOptions,
  SFT_PLACEHOLDERS,
  type SftOptions,
  type SftOptionsInput,
} from './algorithms/sft-options.js';
export type { IterationRecord, IterationStatus } from './algorithms/sft-record.js';
export { GRPO, GrpoError, grpoFromOptions, type GrpoExtras, type GrpoResult } from './algorithms/grpo.js';
export {
  grpoOptionsSchema,
  parseGrpoOptions,
  ESTIMATORS,
  type Estimator,
  type GrpoOptions,
  type GrpoOptionsInput,
} from './algorithms/grpo-options.js';
export type { StepRecord, StepStatus } from './algorithms/grpo-record.js';
export { groupAdvantages, computeAdvantages } from './algorithms/grpo-advantages.js';
export { formatGrpoReport } from './algorithms/grpo-report.js';
export { formatApoReport, wordDiff } from './algorithms/apo-report.js';
export { formatSftReport } from './algorithms/sft-report.js';
export {
  ChatModel,
  ChatError,
  type ChatAnswer,
  type ChatEndpoint,
  type ChatMessage,
  type RetryPolicy,
} from './algorithms/chat-model.js';
export type { AlgorithmCommand, CommandContext } from './algorithms/command.js';
