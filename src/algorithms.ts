// `agl/algorithms`: what improves an agent (Baseline, APO, GEPA, SFT, GRPO) and what `agl train` needs of
// an algorithm. They run against any LightningStore; the Trainer that hosts one is `agl/trainer`.
export type { Algorithm, AlgorithmContext, RolloutOutcome } from './algorithms/algorithm.js';
export { finalRewards } from './adapters/final-rewards.js';
export type { RewardScope } from './sql/final-rewards.js';
export { Baseline, type BaselineResult } from './algorithms/baseline.js';
export {
  APO,
  APO_OPTIONS,
  parseApoOptions,
  type APOExtras,
  type APOOptionsInput,
  type APOResult,
  type APOSettings,
  type Candidate,
  type Cost,
  type StopKind,
  formatApoReport,
  wordDiff,
} from './algorithms/apo/index.js';
export {
  GEPA,
  GEPA_OPTIONS,
  parseGepaOptions,
  type GEPAExtras,
  type GEPAOptionsInput,
  type GEPAResult,
  type GEPASettings,
  type GepaCandidate,
  type GepaCost,
  type GepaStopKind,
  paretoFrontier,
  planMerge,
  formatGepaReport,
} from './algorithms/gepa/index.js';
export {
  SFT,
  SftError,
  sftFromOptions,
  type SftExtras,
  type SftResult,
  SFT_OPTIONS,
  /** @deprecated the same schema as SFT_OPTIONS, under its former name */
  SFT_OPTIONS as sftOptionsSchema,
  parseSftOptions,
  SFT_PLACEHOLDERS,
  type SftOptions,
  type SftOptionsInput,
  type IterationRecord,
  type IterationStatus,
  formatSftReport,
} from './algorithms/sft/index.js';
export {
  GRPO,
  GrpoError,
  grpoFromOptions,
  type GrpoExtras,
  type GrpoResult,
  GRPO_OPTIONS,
  /** @deprecated the same schema as GRPO_OPTIONS, under its former name */
  GRPO_OPTIONS as grpoOptionsSchema,
  parseGrpoOptions,
  ESTIMATORS,
  type Estimator,
  type GrpoOptions,
  type GrpoOptionsInput,
  type StepRecord,
  type StepStatus,
  groupAdvantages,
  computeAdvantages,
  formatGrpoReport,
} from './algorithms/grpo/index.js';
export {
  ChatModel,
  ChatError,
  type ChatAnswer,
  type ChatEndpoint,
  type ChatMessage,
  type RetryPolicy,
} from './algorithms/shared/chat-model.js';
export {
  Evaluation,
  EVAL_OPTIONS,
  parseEvalOptions,
  type EvalOptionsInput,
  type EvalResult,
  type EvalSettings,
  type EvalVariant,
  type PairSummary,
  type VariantSummary,
  formatEvalReport,
  bootstrapMean,
  pairedDifference,
  wilsonInterval,
  type Interval,
  type MeanEstimate,
  type PairedDifference,
  type TaskScores,
} from './algorithms/eval/index.js';
export type { AlgorithmCommand, CommandContext } from './algorithms/shared/command.js';
export { OptionsError, type OptionProblem } from './algorithms/shared/options.js';
// The LLM judge itself (`judge`, `judgeGroup`) is in the light `agl` entry; here, what an
// algorithm of its own needs to judge its rollouts as GRPO, SFT and APO do.
export { RolloutJudge, type JudgedAttempt, type JudgeTally } from './algorithms/judge/rollouts.js';
export {
  JUDGE_OPTIONS,
  checkJudgeOptions,
  judgeSettingsOf,
  type JudgeOptions,
} from './algorithms/judge/options.js';
