import fc from 'fast-check';
import { jsonBytes } from './otlp-model.js';
import { fieldValue, near } from './rest-cases.js';
import type { FuzzRequest } from './server.js';

/**
 * Cases for the routes that name LLM calls: the Anthropic gateway (/v1/messages, proxied to the
 * project's Anthropic test server and recorded as a span), and feedback on a stored call, trace
 * or rollout. Ids come from the store (CallIds), picked by index as the REST cases pick theirs.
 */

/** Calls and spans the store holds, refreshed from it now and then: what feedback can name. */
export interface CallIds {
  readonly spans: readonly {
    trace_id: string;
    span_id: string;
    rollout_id: string | null;
    attempt_id: string | null;
  }[];
  readonly responseIds: readonly string[];
}

const pick = <T>(list: readonly T[], index: number): T | undefined =>
  list.length === 0 ? undefined : list[index % list.length];

const text = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom('', '\ud800', '\u0000', 'x'.repeat(30_000)));
const block = fc.oneof(
  fc.record({ type: fc.constant('text'), text: near(text) }),
  fc.record({ type: fc.constant('tool_use'), id: near(text), name: near(text), input: near(fc.object()) }),
  fc.record({ type: fc.constant('tool_result'), tool_use_id: near(text), content: near(text) }),
  fc.record({ type: fc.constant('thinking'), thinking: near(text), signature: near(text) }),
  fc.record({
    type: fc.constant('image'),
    source: near(fc.record({ type: fc.constant('base64'), media_type: near(text), data: near(text) })),
  }),
  fieldValue,
);
const content = fc.oneof(text, fc.array(near(block), { maxLength: 3 }));

export interface AnthropicCase {
  /** Through a rollout's gateway path (its ids by index into the known spans) or the plain one. */
  readonly rollout?: number;
  readonly body: unknown;
  readonly stream: boolean;
}

export const anthropicCases: fc.Arbitrary<AnthropicCase> = fc.record(
  {
    rollout: fc.nat(),
    stream: fc.boolean(),
    body: near(
      fc.record(
        {
          model: near(fc.constantFrom('claude-test', '')),
          max_tokens: near(fc.constantFrom(1, 16, 0, -1)),
          system: near(fc.oneof(text, fc.array(near(block), { maxLength: 2 }))),
          messages: near(
            fc.array(near(fc.record({ role: near(fc.constantFrom('user', 'assistant')), content })), { maxLength: 4 }),
          ),
          tools: near(
            fc.array(near(fc.record({ name: near(text), description: near(text), input_schema: near(fc.object()) })), {
              maxLength: 2,
            }),
          ),
          stop_sequences: near(fc.array(text, { maxLength: 2 })),
          temperature: near(fc.constantFrom(0, 0.7, 2, -1)),
        },
        { requiredKeys: [] },
      ),
    ),
  },
  { requiredKeys: ['stream', 'body'] },
);

export function anthropicRequest(testCase: AnthropicCase, ids: CallIds): FuzzRequest {
  const span = testCase.rollout === undefined ? undefined : pick(ids.spans, testCase.rollout);
  const base =
    span?.rollout_id && span.attempt_id
      ? `/v1/gateway/rollouts/${encodeURIComponent(span.rollout_id)}/attempts/${encodeURIComponent(span.attempt_id)}/v1`
      : '/v1/gateway/v1';
  const body =
    testCase.stream && testCase.body !== null && typeof testCase.body === 'object' && !Array.isArray(testCase.body)
      ? { ...testCase.body, stream: true }
      : testCase.body;
  return {
    method: 'POST',
    path: `${base}/messages`,
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: jsonBytes(body),
  };
}

/** A stored thing by index ("@N"), or any value. */
const known = near(fc.nat().map((n) => `@${n}`));

export interface FeedbackCase {
  readonly body: unknown;
}

/** One target, as the route wants, mostly; sometimes none, several or anything. */
const feedbackTarget = fc.oneof(
  fc.record({ trace_id: known, span_id: known }, { requiredKeys: ['trace_id'] }),
  fc.record({ response_id: known }),
  fc.record({ rollout_id: known, attempt_id: known }, { requiredKeys: ['rollout_id'] }),
  fc.record({ trace_id: known, response_id: known, rollout_id: known, span_id: known }, { requiredKeys: [] }),
);

export const feedbackCases: fc.Arbitrary<FeedbackCase> = fc.record({
  body: near(
    fc
      .tuple(
        feedbackTarget,
        fc.record(
          {
            feedback_id: near(fc.oneof(fc.constantFrom('fb-1', 'fb-2'), text)),
            name: near(fc.constantFrom('thumbs', 'rating', '')),
            value: near(fc.oneof(fc.double(), fc.constantFrom(0, 1, -1, 1e308))),
            comment: near(text),
          },
          { requiredKeys: ['name', 'value'] },
        ),
      )
      .map(([target, fields]) => ({ ...target, ...fields })),
  ),
});

const FIELD_OF_ID: Record<string, (ids: CallIds, n: number) => string | null | undefined> = {
  trace_id: (ids, n) => pick(ids.spans, n)?.trace_id,
  span_id: (ids, n) => pick(ids.spans, n)?.span_id,
  rollout_id: (ids, n) => pick(ids.spans, n)?.rollout_id,
  attempt_id: (ids, n) => pick(ids.spans, n)?.attempt_id,
  response_id: (ids, n) => pick(ids.responseIds, n),
};

export function feedbackRequest(testCase: FeedbackCase, ids: CallIds): FuzzRequest {
  let body = testCase.body;
  if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
    body = Object.fromEntries(
      Object.entries(body).map(([key, value]) => {
        const index = typeof value === 'string' && /^@\d+$/.test(value) ? Number(value.slice(1)) : undefined;
        return [key, index === undefined ? value : (FIELD_OF_ID[key]?.(ids, index) ?? value)];
      }),
    );
  }
  return {
    method: 'POST',
    path: '/v1/agl/feedback',
    headers: { 'content-type': 'application/json' },
    body: jsonBytes(body),
  };
}
