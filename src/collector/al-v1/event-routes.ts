import { randomBytes } from 'node:crypto';
import * as z from 'zod';
import type { LightningStore } from '../../api/lightning-store.js';
import { AGL, ATTR, V1_EVENT_ATTR, V1_PROXY_ATTR } from '../../api/semconv.js';
import { derivedRowsOf, type SpanKeys, spanKeysCondition } from '../../sql/derived.js';
import { llmCallsOfKeys } from '../../sql/views.js';
import { spanRows } from '../../store/span-json.js';
import type { DuckDBStore } from '../../store/store.js';
import { readJsonObject, sendJson, type Route } from '../http.js';
import { queryObject } from '../rest-route.js';
import { lastTargetOf, rows } from '../span-target.js';
import { checkNesting, parseRequest } from '../validate.js';
import { liveRollout } from './rollout-routes.js';
import { dedupeModelRequests, modelRequestOf, tripletOfCall, trimModelRequest, type V1Event } from './v1-events.js';
import { bookkeepingOf, DEFAULT_ATTEMPT_ID, eventCreate, rewardValue } from './v1-rollouts.js';

type EventStore = Pick<DuckDBStore, 'query' | 'writeSpans'>;

const BODY_LIMIT = 16 * 1024 * 1024;
const eventsQuery = z.object({ event_type: z.string().nullish(), format: z.string().nullish() });

/**
 * Agent Lightning v1's events on agl's data. An event is what agl recorded, not a second copy:
 * a `model_request` is a call of `llm_calls` (through the proxy, agl's gateway or `agl/register`
 * alike), a `reward` a row of `rewards`, any other event a span of the attempt. What v1 posts
 * becomes such a span, beside the attempt's last call, so that agl's exports credit it there.
 */
export function eventRoutes(
  store: EventStore,
  lightning: LightningStore,
  /** Stores the proxy's calls recorded so far: what an agent was answered is an event from then on. */
  flushCalls: () => Promise<void>,
): Route[] {
  return [
    {
      method: 'POST',
      path: '/api/rollouts/{rollout_id}/attempt/{attempt_id}/events',
      handle: async (request, response, [rolloutId, attemptId]) => {
        const body = await readJsonObject(request, BODY_LIMIT);
        checkNesting(body);
        const event = parseRequest(eventCreate, body, 422);
        await liveRollout(lightning, rolloutId);
        if (event.event_type === 'reward') parseRequest(z.object({ value: rewardValue }), event.data, 422);
        const timestamp = Date.now() / 1000;
        await flushCalls();
        await writeEvent(store, { ...event, rollout_id: rolloutId, attempt_id: attemptId, timestamp });
        sendJson(response, 200, { ...event, rollout_id: rolloutId, attempt_id: attemptId, timestamp });
      },
    },
    {
      method: 'GET',
      path: '/api/rollouts/{rollout_id}/events',
      handle: async (request, response, [rolloutId]) => {
        const query = parseRequest(eventsQuery, queryObject(request), 422);
        const rollout = await liveRollout(lightning, rolloutId);
        // v1 reads the attempt its controller last named; agl's runners name theirs themselves.
        const attemptId =
          bookkeepingOf(rollout).last_attempt_id ??
          (await lightning.getLatestAttempt(rolloutId))?.attempt_id ??
          DEFAULT_ATTEMPT_ID;
        const triplet = query.format === 'triplet';
        await flushCalls();
        let events = await eventsOf(store, { rolloutIds: [rolloutId], attemptIds: [attemptId] }, triplet);
        if (query.event_type) events = events.filter((event) => event.event_type === query.event_type);
        sendJson(response, 200, triplet ? dedupeModelRequests(events) : events);
      },
    },
  ];
}

/** A posted event as a span of its attempt: a reward as agl's reward span, anything else as `agl.v1.event`. */
async function writeEvent(store: EventStore, event: V1Event): Promise<void> {
  const keys = { rolloutIds: [event.rollout_id], attemptIds: [event.attempt_id] };
  const target = await lastTargetOf(store, keys);
  const reward = event.event_type === 'reward';
  const data = event.data as { value?: number; message?: unknown };
  const ns = BigInt(Math.round(event.timestamp * 1e6)) * 1000n;
  const span = {
    rollout_id: event.rollout_id,
    attempt_id: event.attempt_id,
    sequence_id: null,
    trace_id: target?.trace_id ?? randomBytes(16).toString('hex'),
    span_id: randomBytes(8).toString('hex'),
    parent_id: target?.parent_id ?? null,
    name: reward ? AGL.annotation : V1_EVENT_ATTR.span,
    status: { status_code: 'OK' as const, description: null },
    attributes: {
      [V1_EVENT_ATTR.type]: event.event_type,
      [V1_EVENT_ATTR.data]: JSON.stringify(event.data),
      ...(reward
        ? {
            [`${ATTR.reward}.0.name`]: 'reward',
            [`${ATTR.reward}.0.value`]: data.value,
            [ATTR.rewardSource]: 'agent',
            ...(typeof data.message === 'string' ? { [ATTR.rewardFeedback]: data.message } : {}),
          }
        : {}),
    },
    events: [],
    links: [],
    start_time: null,
    end_time: null,
    nanos: { start: ns, end: ns },
    context: null,
    parent: null,
    resource: { attributes: { 'service.name': 'agl-v1-events' }, schema_url: '' },
  };
  await store.writeSpans(spanRows(span), 0);
}

const parsed = (text: unknown): unknown => {
  if (typeof text !== 'string') return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
};

/**
 * The events of an attempt, in time order: its calls, the events posted for it, and the rewards
 * agl holds for it that were not posted as events (an agent's own, a feedback, a judge's).
 */
async function eventsOf(store: EventStore, keys: SpanKeys, triplet: boolean): Promise<V1Event[]> {
  const [rolloutId] = keys.rolloutIds as string[];
  const [attemptId] = keys.attemptIds as string[];
  const of = { rollout_id: rolloutId, attempt_id: attemptId };
  const [calls, posted, rewards] = await Promise.all([
    rows(
      store,
      `SELECT c.*, epoch_us(c.start_time) AS start_us, epoch_us(c.end_time) AS end_us, s.status_code, s.status_message,
         s.attributes->>'${ATTR.llmRequest}' AS request, s.attributes->>'${ATTR.llmResponse}' AS response,
         s.attributes->>'http.response.status_code' AS http_status,
         s.attributes->>'${V1_PROXY_ATTR.serverModel}' AS server_model,
         s.attributes->>'${V1_PROXY_ATTR.serverEndpoint}' AS server_endpoint,
         s.attributes->>'${V1_PROXY_ATTR.serverVersion}' AS server_version
       FROM (${llmCallsOfKeys(keys)}) c LEFT JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id`,
    ),
    rows(
      store,
      `SELECT span_id, epoch_us(start_time) AS start_us, attributes->>'${V1_EVENT_ATTR.type}' AS event_type,
         attributes->>'${V1_EVENT_ATTR.data}' AS data
       FROM spans WHERE ${spanKeysCondition(keys)} AND (attributes->>'${V1_EVENT_ATTR.type}') IS NOT NULL`,
    ),
    rows(
      store,
      `SELECT r.span_id, epoch_us(r.time) AS start_us, r.name, r.value, r.feedback, r.source
       FROM (${derivedRowsOf(keys).rewards}) r
       WHERE r.is_primary AND r.span_id NOT IN (SELECT span_id FROM spans WHERE ${spanKeysCondition(keys)}
         AND (attributes->>'${V1_EVENT_ATTR.type}') IS NOT NULL)`,
    ),
  ]);
  const seconds = (us: unknown) => Number(us ?? 0) / 1e6;
  const events: (V1Event & { order: number })[] = [
    ...calls.map((call) => {
      const raw = modelRequestOf(call, parsed(call.request), parsed(call.response));
      return {
        event_type: 'model_request',
        ...of,
        timestamp: seconds(call.end_us ?? call.start_us),
        data: triplet ? tripletOfCall(call, raw) : raw,
        order: 0,
      };
    }),
    ...posted.map((event) => {
      const data = (parsed(event.data) ?? {}) as Record<string, unknown>;
      const eventType = String(event.event_type);
      return {
        event_type: eventType,
        ...of,
        timestamp: seconds(event.start_us),
        data: triplet ? trimEvent(eventType, data) : data,
        order: 1,
      };
    }),
    ...rewards.map((reward) => {
      const data = {
        value: Number(reward.value),
        ...(reward.feedback === null ? {} : { message: String(reward.feedback) }),
        source: String(reward.source),
        reason: String(reward.name),
      };
      return {
        event_type: 'reward',
        ...of,
        timestamp: seconds(reward.start_us),
        data: triplet ? trimEvent('reward', data) : data,
        order: 1,
      };
    }),
  ];
  events.sort((a, b) => a.timestamp - b.timestamp || a.order - b.order);
  return events.map(({ order: _, ...event }) => event);
}

/** v1's triplet trim of a posted event: a model_request to its token ids, a reward to its value. */
function trimEvent(eventType: string, data: Record<string, unknown>): Record<string, unknown> {
  if (eventType === 'model_request') return trimModelRequest(data);
  if (eventType !== 'reward') return data;
  const trimmed: Record<string, unknown> = { value: data.value };
  for (const key of ['source', 'reason']) if (key in data) trimmed[key] = data[key];
  return trimmed;
}
