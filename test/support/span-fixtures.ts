import type { SpanInput } from '../../src/store/span-json.js';

// Builders of spans as agl stores them, for adapter tests with exact expected outputs.

let nextId = 1;
const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');

/** A span; times in seconds; `trace` picks the trace id. */
export function span(
  fields: Partial<SpanInput> & { name: string; start: number; end: number; trace?: number },
): SpanInput {
  const { start, end, trace = 1, ...rest } = fields;
  return {
    rollout_id: 'ro-t',
    attempt_id: 'at-1',
    sequence_id: null,
    trace_id: hex(trace, 32),
    span_id: hex(nextId++, 16),
    parent_id: null,
    kind: 'INTERNAL',
    status: { status_code: 'UNSET', description: null },
    attributes: {},
    events: [],
    links: [],
    start_time: start,
    end_time: end,
    context: null,
    parent: null,
    resource: { attributes: {}, schema_url: '' },
    ...rest,
  };
}

export interface CallFields extends Partial<SpanInput> {
  responseId?: string;
  trace?: number;
  promptIds?: number[];
  responseIds?: number[];
  logprobs?: number[];
}

/** An LLM call as agl's capture records it: asked `question`, answered `answer`, lasting 1 s. */
export function call(question: string, answer: string, start: number, fields: CallFields = {}): SpanInput {
  const { responseId = `resp-${question}`, promptIds = [1, 2], responseIds = [3], logprobs, ...rest } = fields;
  const choice = {
    index: 0,
    message: { role: 'assistant', content: answer },
    finish_reason: 'stop',
    token_ids: responseIds,
    ...(logprobs ? { logprobs: { content: logprobs.map((logprob) => ({ token: 't', logprob })) } } : {}),
  };
  return span({
    name: 'chat m',
    start,
    end: start + 1,
    attributes: {
      'agl.llm.api': 'chat',
      'agl.llm.request': JSON.stringify({ model: 'm', messages: [{ role: 'user', content: question }] }),
      'agl.llm.response': JSON.stringify({
        id: responseId,
        model: 'm',
        prompt_token_ids: promptIds,
        choices: [choice],
      }),
    },
    ...rest,
  });
}

/** A reward span (Agent Lightning's annotation) at `time`. */
export const reward = (value: number, time: number, fields: Partial<SpanInput> & { trace?: number } = {}) =>
  span({
    name: 'agentlightning.annotation',
    start: time,
    end: time,
    attributes: { 'agentlightning.reward.0.name': 'primary', 'agentlightning.reward.0.value': value },
    ...fields,
  });

/** A span of an OTLP/JSON request (otlpJsonRequest); times in nanoseconds. */
export interface OtlpJsonSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly name: string;
  readonly start: bigint;
  readonly end?: bigint;
}

/** One OTLP/JSON export request of `spans`, of a rollout's attempt when given (as resource attributes). */
export function otlpJsonRequest(
  spans: readonly OtlpJsonSpan[],
  of?: { rollout_id: string; attempt: { attempt_id: string } },
): string {
  const attributes = of
    ? [
        { key: 'agentlightning.rollout_id', value: { stringValue: of.rollout_id } },
        { key: 'agentlightning.attempt_id', value: { stringValue: of.attempt.attempt_id } },
      ]
    : [];
  return JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes },
        scopeSpans: [
          {
            spans: spans.map((s) => ({
              traceId: s.traceId,
              spanId: s.spanId,
              name: s.name,
              startTimeUnixNano: String(s.start),
              ...(s.end !== undefined && { endTimeUnixNano: String(s.end) }),
            })),
          },
        ],
      },
    ],
  });
}
