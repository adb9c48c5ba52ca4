import { createHash, randomUUID } from 'node:crypto';
import { NotFoundError } from '../api/errors.js';
import { type Feedback, feedbackBody, type FeedbackReceipt } from '../api/feedback.js';
import type { LightningStore } from '../api/lightning-store.js';
import { AGL, ATTR } from '../api/semconv.js';
import { sqlText } from '../sql/literals.js';
import { spanRows } from '../store/span-json.js';
import type { DuckDBStore } from '../store/store.js';
import type { Route } from './http.js';
import { create } from './rest-route.js';
import { lastTargetOf, nowNs, rows, TARGET_COLUMNS, type Target, targetOf } from './span-target.js';

type FeedbackStore = Pick<DuckDBStore, 'query' | 'writeSpans'>;

/**
 * POST /v1/agl/feedback (api/feedback.ts): resolves the target to a stored span and writes an
 * `agentlightning.annotation` span beside it, through the same writer as every span: a sibling of
 * the target (same parent, same trace and rollout) dated at the target's end, so that the
 * `rewards` view, triplet credit and the final-reward filters give it to the call it names. Its
 * span id is derived from `feedback_id`, so the same feedback sent twice is stored once.
 */
export function feedbackRoute(store: FeedbackStore, lightning: LightningStore): Route {
  return create('/feedback', feedbackBody, async (feedback) => {
    const feedbackId = feedback.feedback_id ?? randomUUID();
    const spanId = createHash('sha256').update(feedbackId).digest('hex').slice(0, 16);
    const stored = await storedReceipt(store, feedbackId, spanId);
    if (stored) return stored;
    const target = await resolveTarget(store, lightning, feedback, feedbackId);
    const { stored: written } = await store.writeSpans(spanRows(feedbackSpan(feedback, feedbackId, spanId, target)), 0);
    return {
      feedback_id: feedbackId,
      trace_id: target.trace_id,
      span_id: spanId,
      target_span_id: target.span_id,
      rollout_id: target.rollout_id,
      attempt_id: target.attempt_id,
      stored: written === 1,
    } satisfies FeedbackReceipt;
  });
}

async function storedReceipt(
  store: FeedbackStore,
  feedbackId: string,
  spanId: string,
): Promise<FeedbackReceipt | null> {
  const [row] = await rows(
    store,
    `SELECT trace_id, rollout_id, attempt_id, attributes->>'${ATTR.feedbackTarget}' AS target FROM spans
     WHERE span_id = '${spanId}' AND name = '${AGL.annotation}' AND (attributes->>'${ATTR.feedbackId}') = ${sqlText(feedbackId)} LIMIT 1`,
  );
  if (!row) return null;
  return {
    feedback_id: feedbackId,
    trace_id: String(row.trace_id),
    span_id: spanId,
    target_span_id: (row.target as string | null) ?? null,
    rollout_id: (row.rollout_id as string | null) ?? null,
    attempt_id: (row.attempt_id as string | null) ?? null,
    stored: false,
  };
}

async function resolveTarget(
  store: FeedbackStore,
  lightning: LightningStore,
  feedback: Feedback,
  feedbackId: string,
): Promise<Target> {
  if (feedback.trace_id !== undefined && feedback.span_id !== undefined) {
    const [span] = await rows(
      store,
      `SELECT ${TARGET_COLUMNS} FROM spans WHERE trace_id = '${feedback.trace_id}' AND span_id = '${feedback.span_id}' LIMIT 1`,
    );
    if (!span) throw new NotFoundError(`no span ${feedback.span_id} in trace ${feedback.trace_id}`);
    return targetOf(span);
  }
  if (feedback.trace_id !== undefined) {
    const found = await lastTargetOf(store, { traceIds: [feedback.trace_id] });
    if (!found) throw new NotFoundError(`no trace ${feedback.trace_id}`);
    return found;
  }
  if (feedback.response_id !== undefined) {
    // The rows of llm_calls, whose calls read from GenAI log events no derived row holds; of
    // several with the id (a retry), the first to start, which triplet credit counts.
    const [call] = await rows(
      store,
      `SELECT ${TARGET_COLUMNS} FROM llm_calls WHERE response_id = ${sqlText(feedback.response_id)}
       ORDER BY start_time, sequence_id NULLS LAST, span_id LIMIT 1`,
    );
    if (!call) throw new NotFoundError(`no LLM call with response_id ${JSON.stringify(feedback.response_id)}`);
    return targetOf(call);
  }
  return rolloutTarget(store, lightning, feedback.rollout_id as string, feedback.attempt_id, feedbackId);
}

/** A rollout's attempt (its latest when none is named): its last call; a rollout with no span yet gets a trace of its own. */
async function rolloutTarget(
  store: FeedbackStore,
  lightning: LightningStore,
  rolloutId: string,
  attemptId: string | undefined,
  feedbackId: string,
): Promise<Target> {
  if (!(await lightning.getRolloutById(rolloutId))) throw new NotFoundError(`no rollout ${rolloutId}`);
  const attempt =
    attemptId === undefined
      ? await lightning.getLatestAttempt(rolloutId)
      : (await lightning.queryAttempts(rolloutId)).items.find((candidate) => candidate.attempt_id === attemptId);
  if (!attempt)
    throw new NotFoundError(
      attemptId === undefined
        ? `rollout ${rolloutId} has no attempt`
        : `rollout ${rolloutId} has no attempt ${attemptId}`,
    );
  const found = await lastTargetOf(store, { rolloutIds: [rolloutId], attemptIds: [attempt.attempt_id] });
  return (
    found ?? {
      trace_id: createHash('sha256').update(`trace:${feedbackId}`).digest('hex').slice(0, 32),
      span_id: null,
      parent_id: null,
      rollout_id: rolloutId,
      attempt_id: attempt.attempt_id,
      end_ns: nowNs(),
    }
  );
}

function feedbackSpan(feedback: Feedback, feedbackId: string, spanId: string, target: Target) {
  return {
    rollout_id: target.rollout_id,
    attempt_id: target.attempt_id,
    sequence_id: null,
    trace_id: target.trace_id,
    span_id: spanId,
    parent_id: target.parent_id,
    name: AGL.annotation,
    status: { status_code: 'OK' as const, description: null },
    attributes: {
      [`${ATTR.reward}.0.name`]: feedback.name,
      [`${ATTR.reward}.0.value`]: feedback.value,
      [ATTR.rewardSource]: 'feedback',
      [ATTR.feedbackId]: feedbackId,
      ...(target.span_id === null ? {} : { [ATTR.feedbackTarget]: target.span_id }),
      ...(feedback.comment === undefined ? {} : { [ATTR.rewardFeedback]: feedback.comment }),
    },
    events: [],
    links: [],
    start_time: null,
    end_time: null,
    nanos: { start: target.end_ns, end: target.end_ns },
    context: null,
    parent: null,
    resource: { attributes: { 'service.name': 'agl-feedback' }, schema_url: '' },
  };
}
