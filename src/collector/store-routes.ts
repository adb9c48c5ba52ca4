import type { IncomingMessage, ServerResponse } from 'node:http';
import type { LightningStore } from '../api/lightning-store.js';
import { InvalidQueryError, NotFoundError } from '../api/errors.js';
import { ATTEMPT_STATUSES, ROLLOUT_MODES, ROLLOUT_STATUSES, WORKER_STATUSES, type AttemptUpdate, type RolloutUpdate } from '../api/types.js';
import { HttpError, readJsonObject, sendJson, type Route } from './http.js';
import {
  checkNesting,
  clip,
  filterLogic,
  listOf,
  namedResources,
  notNull,
  oneOf,
  optionalNumber,
  optionalObject,
  optionalString,
  pagination,
  rolloutConfig,
  rolloutRequest,
  spanBody,
  spanQuery,
} from './validate.js';

type Obj = Record<string, unknown>;

const BODY_LIMIT = 16 * 1024 * 1024;
const MAX_WAIT_SECONDS = 60;

/**
 * The LightningStore REST API under /v1/agl/, with Agent Lightning v0.x's routes, bodies and
 * status codes (201 for creations, null for an unknown id on GET, 404 for an unknown id on
 * updates, 400 naming the field of a bad body or query).
 */
export function storeRoutes(store: LightningStore): Route[] {
  const json = (status: number, produce: (body: Obj, query: Obj, params: string[]) => Promise<unknown>) =>
    async (request: IncomingMessage, response: ServerResponse, params: string[]) => {
      const body = request.method === 'POST' ? await readOptionalJson(request) : {};
      const query = queryObject(request);
      try {
        sendJson(response, status, (await produce(body, query, params)) ?? null);
      } catch (error) {
        if (error instanceof NotFoundError) throw new HttpError(404, clip(error.message, 300));
        if (error instanceof InvalidQueryError) throw new HttpError(400, clip(error.message, 300));
        throw error;
      }
    };
  const rolloutQuery = (q: Obj) => ({
    ...pagination(q),
    status_in: listOf('status_in', q.status_in, ROLLOUT_STATUSES),
    rollout_id_in: listOf('rollout_id_in', q.rollout_id_in),
    rollout_id_contains: optionalString(q, 'rollout_id_contains') ?? undefined,
    filter_logic: filterLogic(q),
  });
  const workerQuery = (q: Obj) => ({
    ...pagination(q),
    status_in: listOf('status_in', q.status_in, WORKER_STATUSES),
    worker_id_contains: optionalString(q, 'worker_id_contains') ?? undefined,
    filter_logic: filterLogic(q),
  });
  const resourcesQuery = (q: Obj) => ({
    ...pagination(q),
    resources_id: optionalString(q, 'resources_id') ?? undefined,
    resources_id_contains: optionalString(q, 'resources_id_contains') ?? undefined,
  });
  const route = (method: string, path: string, handle: Route['handle']): Route => ({ method, path: `/v1/agl${path}`, handle });

  return [
    route('POST', '/queues/rollouts/enqueue', json(201, async (b) => {
      if (!Array.isArray(b.rollouts)) throw new HttpError(400, 'the body needs "rollouts": a list of {input, mode?, resources_id?, config?, metadata?}');
      return store.enqueueManyRollouts(b.rollouts.map((r, i) => rolloutRequest(r, `rollouts[${i}]`)));
    })),
    route('POST', '/queues/rollouts/dequeue', json(200, async (b) => {
      const limit = optionalNumber(b, 'limit', { integer: true }) ?? 1;
      const waitSeconds = Math.min(MAX_WAIT_SECONDS, optionalNumber(b, 'wait_seconds', { min: 0 }) ?? 0);
      return store.dequeueManyRollouts({ limit, workerId: optionalString(b, 'worker_id') ?? null, waitSeconds });
    })),
    route('POST', '/rollouts', json(201, async (b) => store.startRollout({ ...rolloutRequest(b, 'the body'), worker_id: optionalString(b, 'worker_id') ?? null }))),
    route('GET', '/rollouts', json(200, async (_b, q) => store.queryRollouts(rolloutQuery(q)))),
    route('POST', '/rollouts/search', json(200, async (b) => store.queryRollouts(rolloutQuery(b)))),
    route('GET', '/rollouts/{id}/attempts/latest', json(200, async (_b, _q, [id]) => store.getLatestAttempt(id))),
    route('GET', '/rollouts/{id}/attempts', json(200, async (_b, q, [id]) => store.queryAttempts(id, pagination(q)))),
    route('POST', '/rollouts/{id}/attempts/search', json(200, async (b, _q, [id]) => store.queryAttempts(id, pagination(b)))),
    route('POST', '/rollouts/{id}/attempts', json(201, async (b, _q, [id]) => store.startAttempt(id, optionalString(b, 'worker_id') ?? null))),
    route('POST', '/rollouts/{id}/attempts/{attempt}', json(200, async (b, _q, [id, attempt]) => store.updateAttempt(id, attempt, attemptUpdate(b)))),
    route('GET', '/rollouts/{id}', json(200, async (_b, _q, [id]) => store.getRolloutById(id))),
    route('POST', '/rollouts/{id}', json(200, async (b, _q, [id]) => store.updateRollout(id, rolloutUpdate(b)))),
    route('GET', '/workers', json(200, async (_b, q) => store.queryWorkers(workerQuery(q)))),
    route('POST', '/workers/search', json(200, async (b) => store.queryWorkers(workerQuery(b)))),
    route('GET', '/workers/{id}', json(200, async (_b, _q, [id]) => store.getWorkerById(id))),
    route('POST', '/workers/{id}', json(200, async (b, _q, [id]) => {
      notNull(b, 'heartbeat_stats');
      return store.updateWorker(id, optionalObject(b, 'heartbeat_stats') ?? undefined);
    })),
    route('GET', '/statistics', json(200, async () => store.statistics())),
    route('GET', '/resources', json(200, async (_b, q) => store.queryResources(resourcesQuery(q)))),
    route('POST', '/resources', json(201, async (b) => store.addResources(namedResources(b)))),
    route('GET', '/resources/latest', json(200, async () => store.getLatestResources())),
    route('GET', '/resources/{id}', json(200, async (_b, _q, [id]) => store.getResourcesById(id))),
    route('POST', '/resources/{id}', json(200, async (b, _q, [id]) => store.updateResources(id, namedResources(b)))),
    route('POST', '/spans', json(201, async (b) => {
      const span = spanBody(b);
      if (span.sequence_id === undefined) span.sequence_id = await store.getNextSpanSequenceId(span.rollout_id, span.attempt_id);
      return store.addSpan(span);
    })),
    route('GET', '/spans', json(200, async (_b, q) => store.querySpans(spanQuery(q)))),
    route('POST', '/spans/search', json(200, async (b) => store.querySpans(spanQuery(b)))),
    route('POST', '/spans/next', json(200, async (b) => {
      const rolloutId = optionalString(b, 'rollout_id');
      const attemptId = optionalString(b, 'attempt_id');
      if (!rolloutId || !attemptId) throw new HttpError(400, 'the body needs "rollout_id" and "attempt_id"');
      return { sequence_id: await store.getNextSpanSequenceId(rolloutId, attemptId) };
    })),
    route('POST', '/waits/rollouts', json(200, async (b) => {
      const ids = listOf('rollout_ids', b.rollout_ids);
      if (!Array.isArray(b.rollout_ids) || ids === undefined) throw new HttpError(400, 'the body needs "rollout_ids": a list of rollout ids');
      // A server-side long poll, capped so that a request never hangs for good.
      const timeout = Math.min(MAX_WAIT_SECONDS, optionalNumber(b, 'timeout', { min: 0 }) ?? MAX_WAIT_SECONDS);
      return store.waitForRollouts(ids, timeout);
    })),
  ];
}

function rolloutUpdate(b: Obj): RolloutUpdate {
  notNull(b, 'status');
  notNull(b, 'config');
  const update: RolloutUpdate = {};
  if ('input' in b) update.input = b.input;
  if ('mode' in b) update.mode = b.mode === null ? null : oneOf('mode', b.mode, ROLLOUT_MODES);
  if ('resources_id' in b) update.resources_id = optionalString(b, 'resources_id') ?? null;
  if ('metadata' in b) update.metadata = optionalObject(b, 'metadata') ?? null;
  if (b.status !== undefined) update.status = oneOf('status', b.status, ROLLOUT_STATUSES);
  if (b.config !== undefined) update.config = rolloutConfig(b.config)!;
  return update;
}

function attemptUpdate(b: Obj): AttemptUpdate {
  for (const field of ['status', 'worker_id', 'last_heartbeat_time', 'metadata']) notNull(b, field);
  const update: AttemptUpdate = {};
  if (b.status !== undefined) update.status = oneOf('status', b.status, ATTEMPT_STATUSES);
  if (b.worker_id !== undefined) update.worker_id = optionalString(b, 'worker_id')!;
  if (b.last_heartbeat_time !== undefined) update.last_heartbeat_time = optionalNumber(b, 'last_heartbeat_time', { min: 0 });
  if (b.metadata !== undefined) update.metadata = optionalObject(b, 'metadata')!;
  return update;
}

/** A JSON object body that may be missing or null, nested at most MAX_NESTING_DEPTH deep. */
async function readOptionalJson(request: IncomingMessage): Promise<Obj> {
  const value = await readJsonObject(request, BODY_LIMIT, { orEmpty: true });
  checkNesting(value);
  return value;
}

/** Query parameters; repeated ones (status_in=a&status_in=b) become lists. */
function queryObject(request: IncomingMessage): Obj {
  const params = new URL(request.url ?? '/', 'http://agl').searchParams;
  const query: Obj = {};
  for (const key of new Set(params.keys())) {
    const all = params.getAll(key);
    query[key] = key.endsWith('_in') ? all : all[0];
  }
  return query;
}
