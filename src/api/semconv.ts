/**
 * Span names and attribute keys agl writes. The `agentlightning.*` ones are Agent Lightning's
 * (so its readers and ours agree); `agl.llm.*` hold the exact HTTP exchange of an LLM call, the
 * source the `llm_calls` view reads; `gen_ai.*` are OpenTelemetry's GenAI conventions, set too
 * so that other OTel tools understand the spans.
 */
export const AGL = {
  annotation: 'agentlightning.annotation',
  message: 'agentlightning.message',
  object: 'agentlightning.object',
  exception: 'agentlightning.exception',
  operation: 'agentlightning.operation',
  /** The operation name that marks an operation span as a reward. */
  rewardOperation: 'agentlightning.reward',
} as const;

export const ATTR = {
  rolloutId: 'agentlightning.rollout_id',
  attemptId: 'agentlightning.attempt_id',
  /** A span's place in its attempt, when the sender numbered it (Agent Lightning's clients do). */
  sequenceId: 'agentlightning.span_sequence_id',
  reward: 'agentlightning.reward',
  link: 'agentlightning.link',
  tag: 'agentlightning.tag',
  messageBody: 'agentlightning.message.body',
  objectType: 'agentlightning.object.type',
  objectLiteral: 'agentlightning.object.literal',
  objectJson: 'agentlightning.object.json',
  operationName: 'agentlightning.operation.name',
  operationInput: 'agentlightning.operation.input',
  operationOutput: 'agentlightning.operation.output',

  /** The request body as sent (after agl's own additions such as `return_token_ids`). */
  llmRequest: 'agl.llm.request',
  /** The response body; for a streamed call, the chunks assembled into the non-streamed shape. */
  llmResponse: 'agl.llm.response',
  /** `chat`, `text_completion`, `responses` or `embeddings`: which API the exchange used. */
  llmApi: 'agl.llm.api',
  llmStreamed: 'agl.llm.streamed',
} as const;

/**
 * The span the SFT algorithm records per iteration, on its run's own rollout (the `sft_iterations`
 * view reads it): what the iteration selected, exported, ran and published.
 */
export const SFT = {
  iterationSpan: 'agl.sft.iteration',
  iteration: 'agl.sft.iteration',
  status: 'agl.sft.status',
  usedResourcesId: 'agl.sft.used_resources_id',
  rollouts: 'agl.sft.rollouts',
  succeeded: 'agl.sft.succeeded',
  meanReward: 'agl.sft.mean_reward',
  valMeanReward: 'agl.sft.val_mean_reward',
  keptRollouts: 'agl.sft.kept_rollouts',
  keptRolloutIds: 'agl.sft.kept_rollout_ids',
  dataset: 'agl.sft.dataset',
  format: 'agl.sft.format',
  records: 'agl.sft.records',
  duplicates: 'agl.sft.duplicates',
  skipped: 'agl.sft.skipped',
  command: 'agl.sft.command',
  exitCode: 'agl.sft.exit_code',
  exitSignal: 'agl.sft.exit_signal',
  outputTail: 'agl.sft.output_tail',
  log: 'agl.sft.log',
  resourcesId: 'agl.sft.resources_id',
  model: 'agl.sft.model',
  endpoint: 'agl.sft.endpoint',
  error: 'agl.sft.error',
} as const;

/**
 * The span the GRPO algorithm records per training step, on its run's own rollout (the
 * `training_steps` view reads it): the batch, its data quality, its rewards and where the time went.
 */
export const GRPO = {
  stepSpan: 'agl.grpo.step',
  step: 'agl.grpo.step',
  status: 'agl.grpo.status',
  batchId: 'agl.grpo.batch_id',
  modelVersion: 'agl.grpo.model_version',
  resourcesId: 'agl.grpo.resources_id',
  nextModelVersion: 'agl.grpo.next_model_version',
  nextResourcesId: 'agl.grpo.next_resources_id',
  rollouts: 'agl.grpo.rollouts',
  keptRollouts: 'agl.grpo.kept_rollouts',
  groups: 'agl.grpo.groups',
  topUps: 'agl.grpo.top_ups',
  rows: 'agl.grpo.rows',
  tokens: 'agl.grpo.tokens',
  trainedTokens: 'agl.grpo.trained_tokens',
  rewardMean: 'agl.grpo.reward_mean',
  rewardStd: 'agl.grpo.reward_std',
  rewardMin: 'agl.grpo.reward_min',
  rewardMax: 'agl.grpo.reward_max',
  singleSampleGroups: 'agl.grpo.single_sample_groups',
  zeroVarianceGroups: 'agl.grpo.zero_variance_groups',
  /** Followed by one of GRPO_DROP_REASONS: agl.grpo.dropped.no_reward ... */
  droppedPrefix: 'agl.grpo.dropped.',
  truncated: 'agl.grpo.truncated',
  filledRewards: 'agl.grpo.filled_rewards',
  rolloutSeconds: 'agl.grpo.rollout_seconds',
  buildSeconds: 'agl.grpo.build_seconds',
  trainerSeconds: 'agl.grpo.trainer_seconds',
  /** The trainer's metrics, as JSON text. */
  metrics: 'agl.grpo.metrics',
  error: 'agl.grpo.error',
} as const;

/** Why a rollout is left out of a GRPO batch (docs/training.md, "Data quality"). */
export const GRPO_DROP_REASONS = ['failed', 'stale', 'no_token_ids', 'no_reward', 'no_calls', 'overlong'] as const;
