// `agl`: what an agent imports. Light on purpose (no database, no server): recording itself is
// started by `node --import agl/register`; the store's client is `agl/client`, the store
// `agl/store`, the server `agl/server`, algorithms `agl/algorithms`, the Trainer `agl/trainer`.
export {
  emitAnnotation,
  emitException,
  emitMessage,
  emitObject,
  emitReward,
  operation,
  type RewardOptions,
} from './instrumentation/emitters.js';
export {
  judge,
  judgeGroup,
  JudgeError,
  type JudgeCall,
  type JudgeSettings,
  type Transcript,
  type TranscriptMessage,
  type Verdict,
} from './algorithms/judge/judge.js';
export { withRollout, currentRollout, type RolloutScope } from './instrumentation/rollout-context.js';
export { findFinalReward, findRewardSpans, getRewardValue, getRewards } from './adapters/rewards.js';
export { rollout, formatTemplate, type Agent, type RolloutContext } from './runner/agent.js';
export { Runner, type RunnerOptions, type RunnerHooks } from './runner/runner.js';
export type {
  LightningStore,
  RolloutQuery,
  WorkerQuery,
  ResourcesQuery,
  StoreStatistics,
} from './api/lightning-store.js';
export * from './api/errors.js';
export * from './api/types.js';
