import { EVAL_TASK, EVAL_VARIANT, GRPO_DROP_REASONS, GRPO_STEP, SFT_ITERATION } from './run-records.js';

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

/** Who gave a reward: the `source` column of the `rewards` view. */
export const REWARD_SOURCES = ['agent', 'feedback', 'judge'] as const;
export type RewardSource = (typeof REWARD_SOURCES)[number];

export const ATTR = {
  rolloutId: 'agentlightning.rollout_id',
  attemptId: 'agentlightning.attempt_id',
  /** A span's place in its attempt, when the sender numbered it (Agent Lightning's clients do). */
  sequenceId: 'agentlightning.span_sequence_id',
  reward: 'agentlightning.reward',
  /** Text beside a reward span's numbers: the agent's explanation, a user's comment, a judge's reason. */
  rewardFeedback: 'agl.reward.feedback',
  /** Who gave a reward span: `agent` (emitted in its trace, the default), `feedback` (POST /v1/agl/feedback) or `judge`. */
  rewardSource: 'agl.reward.source',
  /** The client-given id of a feedback (its span id is derived from it: one span per id). */
  feedbackId: 'agl.feedback.id',
  /** The span a feedback names (the call it is credited to). */
  feedbackTarget: 'agl.feedback.target_span_id',
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
 * OpenTelemetry's GenAI conventions (semantic-conventions-genai) that agl reads and writes
 * besides the summary attributes: the documents of a call's content, the event that carries
 * them beside the span, and the event of an evaluator's verdict on a call.
 */
export const GENAI = {
  inputMessages: 'gen_ai.input.messages',
  outputMessages: 'gen_ai.output.messages',
  systemInstructions: 'gen_ai.system_instructions',
  toolDefinitions: 'gen_ai.tool.definitions',
  operationDetails: 'gen_ai.client.inference.operation.details',
  evaluationResult: 'gen_ai.evaluation.result',
} as const;

/**
 * What Agent Lightning v1's proxy (`/proxy/rollout/...`) adds to a gateway call's span: the
 * rollout's mode and the registered server the call went to, which v1's `model_request` event
 * holds as `server` (`model`, `endpoint`, `version`) and `model_version`.
 */
export const V1_PROXY_ATTR = {
  mode: 'agl.v1.mode',
  serverModel: 'agl.v1.server.model',
  serverEndpoint: 'agl.v1.server.endpoint',
  serverVersion: 'agl.v1.server.version',
} as const;

/**
 * An event posted to Agent Lightning v1's events route: its type and data as posted. A reward is
 * an `agentlightning.annotation` span (a row of `rewards`) with these too; any other type is an
 * `agl.v1.event` span of the attempt.
 */
export const V1_EVENT_ATTR = {
  span: 'agl.v1.event',
  type: 'agl.v1.event.type',
  data: 'agl.v1.event.data',
} as const;

/**
 * The span an algorithm records on its run's own rollout for each LLM judge call (judge
 * options of GRPO, SFT, APO): the judge's model, the rollouts it scored, what it was asked and
 * answered, and its tokens. No `gen_ai.*` attributes: a judge call is never an `llm_calls` row,
 * so never training data.
 */
export const JUDGE = {
  callSpan: 'agl.judge.call',
  model: 'agl.judge.model',
  rolloutIds: 'agl.judge.rollout_ids',
  scores: 'agl.judge.scores',
  prompt: 'agl.judge.prompt',
  answer: 'agl.judge.answer',
  inputTokens: 'agl.judge.input_tokens',
  outputTokens: 'agl.judge.output_tokens',
  tries: 'agl.judge.tries',
} as const;

/**
 * The span the SFT algorithm records per iteration, on its run's own rollout (the `sft_iterations`
 * view reads it): what the iteration selected, exported, ran and published (run-records.ts).
 */
export const SFT = { iterationSpan: SFT_ITERATION.span, ...SFT_ITERATION.attributes } as const;

const { dropped, ...stepAttributes } = GRPO_STEP.attributes;

/**
 * The span the GRPO algorithm records per training step, on its run's own rollout (the
 * `training_steps` view reads it): the batch, its data quality, its rewards and where the time
 * went (run-records.ts). `droppedPrefix` is followed by one of GRPO_DROP_REASONS.
 */
export const GRPO = { stepSpan: GRPO_STEP.span, ...stepAttributes, droppedPrefix: dropped } as const;

/**
 * The spans an evaluation records on its run's own rollout (the `evaluations` and
 * `evaluation_tasks` views read them): one per variant, one per variant and task.
 */
export const EVAL = {
  variantSpan: EVAL_VARIANT.span,
  taskSpan: EVAL_TASK.span,
  variant: EVAL_VARIANT.attributes,
  task: EVAL_TASK.attributes,
} as const;

export { GRPO_DROP_REASONS };
