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
