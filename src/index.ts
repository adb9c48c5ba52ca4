// `agl`: what an agent or a runner imports. Light on purpose (no database): the store and the
// server are in `agl/store`, recording itself is started by `node --import agl/register`.
export { emitAnnotation, emitException, emitMessage, emitObject, emitReward, operation, type RewardOptions } from './instrumentation/emitters.js';
export { withRollout, currentRollout, type RolloutScope } from './instrumentation/rollout-context.js';
export { findFinalReward, findRewardSpans, getRewardValue, getRewards } from './instrumentation/reward-spans.js';
export { StoreAnswerError, StoreClient, StoreUnreachableError, type StoreClientOptions } from './collector/store-client.js';
export { gatewayBaseUrl, gatewayEnv } from './collector/gateway-url.js';
export { rollout, formatTemplate, type Agent, type RolloutContext } from './runtime/agent.js';
export { Runner, type RunnerOptions, type RunnerHooks } from './runtime/runner.js';
export { startExampleModel, EXAMPLE_MODEL } from './runtime/example-model.js';
export { Baseline, finalRewards, type Algorithm, type AlgorithmContext, type BaselineResult, type RolloutOutcome } from './runtime/algorithm.js';
export type { LightningStore, RolloutQuery, WorkerQuery, ResourcesQuery, StoreStatistics } from './lightning-store.js';
export { NotFoundError } from './store/rollout-state.js';
export { InvalidQueryError } from './store/paginate.js';
export * from './types.js';
