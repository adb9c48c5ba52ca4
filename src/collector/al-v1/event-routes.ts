import { createHash, randomBytes } from 'node:crypto';
import * as z from 'zod';
import type { LightningStore } from '../../api/lightning-store.js';
import { AGL, ATTR, V1_EVENT_ATTR, V1_PROXY_ATTR } from '../../api/semconv.js';
import { derivedRowsOf, type SpanKeys, spanKeysCondition } from '../../sql/derived.js';
import { spanRows } from '../../store/span-json.js';
import type { DuckDBStore } from '../../store/store.js';
import { readJsonObject, sendJson, type Route } from '../http.js';
import { queryObject } from '../rest-route.js';
import { llmCallsSqlOfKeys, rows } from '../span-target.js';
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

/**
 * A posted event as a span of its attempt: a reward as agl's reward span, anything else as
 * `agl.v1.event`. Dated when posted: agl credits a reward to the attempt's last call before it.
 * The attempt's events share a trace of their own (v1's proxy calls each have theirs).
 */
async function writeEvent(store: EventStore, event: V1Event): Promise<void> {
  const reward = event.event_type === 'reward';
  const data = event.data as { value?: number; message?: unknown };
  const ns = BigInt(Math.round(event.timestamp * 1e6)) * 1000n;
  const span = {
    rollout_id: event.rollout_id,
    attempt_id: event.attempt_id,
    sequence_id: null,
    trace_id: createHash('sha256').update(`agl-v1:${event.rollout_id}/${event.attempt_id}`).digest('hex').slice(0, 32),
    span_id: randomBytes(8).toString('hex'),
    parent_id: null,
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
 * agl holds for it that were not posted as events (an agent's own, a feedback, a judge's). One
 * query: a trainer reads every rollout's events, one after another.
 */
async function eventsOf(store: EventStore, keys: SpanKeys, triplet: boolean): Promise<V1Event[]> {
  const [rolloutId] = keys.rolloutIds as string[];
  const [attemptId] = keys.attemptIds as string[];
  const attr = (name: string, t = 's') => `${t}.attributes->>'${name}'`;
  const found = await rows(
    store,
    `WITH calls AS MATERIALIZED (${await llmCallsSqlOfKeys(store, keys)}),
     posted AS MATERIALIZED (SELECT span_id, start_time, attributes FROM spans
       WHERE ${spanKeysCondition(keys)} AND (${attr(V1_EVENT_ATTR.type, 'spans')}) IS NOT NULL)
     SELECT 'call' AS kind, epoch_us(coalesce(c.end_time, c.start_time)) AS at_us, json_object(
         'model', c.model, 'response_id', c.response_id, 'finish_reason', c.finish_reason,
         'input_tokens', c.input_tokens, 'output_tokens', c.output_tokens,
         'input_messages', c.input_messages, 'output_messages', c.output_messages,
         'prompt_token_ids', c.prompt_token_ids, 'response_token_ids', c.response_token_ids,
         'response_logprobs', c.response_logprobs,
         'start_us', epoch_us(c.start_time), 'end_us', epoch_us(c.end_time),
         'status_code', s.status_code, 'status_message', s.status_message,
         'request', ${attr(ATTR.llmRequest)}, 'response', ${attr(ATTR.llmResponse)},
         'http_status', ${attr('http.response.status_code')},
         'server_model', ${attr(V1_PROXY_ATTR.serverModel)}, 'server_endpoint', ${attr(V1_PROXY_ATTR.serverEndpoint)},
         'server_version', ${attr(V1_PROXY_ATTR.serverVersion)}) AS payload
       FROM calls c LEFT JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
     UNION ALL
     SELECT 'posted', epoch_us(p.start_time),
         json_object('event_type', ${attr(V1_EVENT_ATTR.type, 'p')}, 'data', ${attr(V1_EVENT_ATTR.data, 'p')})
       FROM posted p
     UNION ALL
     SELECT 'reward', epoch_us(r.time), json_object('value', r.value, 'feedback', r.feedback, 'source', r.source, 'name', r.name)
       FROM (${derivedRowsOf(keys).rewards}) r
       WHERE r.is_primary AND r.span_id NOT IN (SELECT span_id FROM posted)
     ORDER BY at_us, kind`,
  );
  return found.map(({ kind, at_us, payload }) => {
    const row = payload as Record<string, unknown>;
    const event = { rollout_id: rolloutId, attempt_id: attemptId, timestamp: Number(at_us ?? 0) / 1e6 };
    if (kind === 'call') {
      const raw = modelRequestOf(row, parsed(row.request), parsed(row.response));
      return { event_type: 'model_request', ...event, data: triplet ? tripletOfCall(row, raw) : raw };
    }
    if (kind === 'posted') {
      const eventType = String(row.event_type);
      const data = (parsed(row.data) ?? {}) as Record<string, unknown>;
      return { event_type: eventType, ...event, data: triplet ? trimEvent(eventType, data) : data };
    }
    const data = {
      value: Number(row.value),
      ...(row.feedback === null ? {} : { message: String(row.feedback) }),
      source: String(row.source),
      reason: String(row.name),
    };
    return { event_type: 'reward', ...event, data: triplet ? trimEvent('reward', data) : data };
  });
}

/** v1's triplet trim of a posted event: a model_request to its token ids, a reward to its value. */
function trimEvent(eventType: string, data: Record<string, unknown>): Record<string, unknown> {
  if (eventType === 'model_request') return trimModelRequest(data);
  if (eventType !== 'reward') return data;
  const trimmed: Record<string, unknown> = { value: data.value };
  for (const key of ['source', 'reason']) if (key in data) trimmed[key] = data[key];
  return trimmed;
}
