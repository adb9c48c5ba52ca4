import * as z from 'zod';
import { mustBe, numberIn, optional } from './schema-fields.js';

/**
 * POST /v1/agl/feedback: a reward given after the fact (a user's thumbs-up, a rating, a
 * correction) to a call, trace or rollout already stored. Exactly one target: `trace_id` (with
 * `span_id`, the call or span it names; without, the trace's last call), `response_id` (the
 * provider's id of the call's answer), or `rollout_id` (with `attempt_id`; without, its latest
 * attempt). docs/recording.md says how it is stored.
 */
const hex = (digits: 16 | 32) =>
  z.string().regex(new RegExp(`^[0-9a-f]{${digits}}$`), { error: mustBe(`lowercase hex of ${digits} digits`) });
const text = (max: number) =>
  z
    .string({ error: mustBe('a string') })
    .min(1, { error: () => 'is required' })
    .max(max, { error: () => `is longer than ${max} characters` });

export const feedbackBody = z
  .object({
    feedback_id: optional(text(200)),
    trace_id: optional(hex(32)),
    span_id: optional(hex(16)),
    response_id: optional(text(500)),
    rollout_id: optional(text(200)),
    attempt_id: optional(text(200)),
    name: text(200),
    value: numberIn(),
    comment: optional(
      z.string({ error: mustBe('a string') }).max(20_000, { error: () => 'is longer than 20000 characters' }),
    ),
  })
  .superRefine((body, context) => {
    const targets = [body.trace_id, body.response_id, body.rollout_id].filter((t) => t !== undefined).length;
    const problem =
      targets !== 1
        ? 'needs exactly one target: trace_id (and span_id), response_id, or rollout_id (and attempt_id)'
        : body.span_id !== undefined && body.trace_id === undefined
          ? 'span_id needs trace_id'
          : body.attempt_id !== undefined && body.rollout_id === undefined
            ? 'attempt_id needs rollout_id'
            : undefined;
    if (problem) context.addIssue({ code: 'custom', message: problem, path: [] });
  });

export type FeedbackRequest = z.input<typeof feedbackBody>;
export type Feedback = z.output<typeof feedbackBody>;

/** What the server answers: where the feedback went (201 when stored, 200 when the id was stored before). */
export interface FeedbackReceipt {
  readonly feedback_id: string;
  readonly trace_id: string;
  /** The feedback's own span (agentlightning.annotation). */
  readonly span_id: string;
  /** The span it is credited to (the call it names), null for a rollout with no span yet. */
  readonly target_span_id: string | null;
  readonly rollout_id: string | null;
  readonly attempt_id: string | null;
  /** Whether this request stored it (false: the same feedback_id was stored before). */
  readonly stored: boolean;
}
