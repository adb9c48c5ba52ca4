import type { IncomingMessage, ServerResponse } from 'node:http';
import * as z from 'zod';
import { ConflictError } from '../../api/errors.js';
import type { LightningStore } from '../../api/lightning-store.js';
import { numberIn } from '../../api/schema-fields.js';
import type { Attempt, Rollout } from '../../api/types.js';
import { HttpError, readJson, readJsonObject, sendJson, type Route } from '../http.js';
import { queryObject } from '../rest-route.js';
import { checkNesting, parseRequest } from '../validate.js';
import {
  AGL_STATUSES_OF,
  bookkeepingOf,
  DEFAULT_ATTEMPT_ID,
  isDeleted,
  metadataWith,
  rolloutCreates,
  rolloutPatch,
  rolloutRequestOf,
  V1_STATES,
  V1_TRANSITIONS,
  v1RolloutOf,
  v1StateOf,
  type V1StatusPatch,
} from './v1-rollouts.js';

const BODY_LIMIT = 16 * 1024 * 1024;
/** FastAPI answers a body or query its models refuse with 422; v1's clients see the same. */
const UNPROCESSABLE = 422;

const listQuery = z.object({
  state_in: z.array(z.enum(V1_STATES)).min(1, { error: () => 'is required (state_in=queuing&state_in=running ...)' }),
  limit: numberIn({ integer: true, min: 1, max: 100_000 }).default(500),
});
const terminalQuery = z.object({
  after: numberIn({ integer: true }).default(0),
  limit: numberIn({ integer: true }).default(1000),
});

const notFound = (rolloutId: string) => new HttpError(404, `Rollout not found: ${rolloutId}`);

/** The rollout as v1 sees it: one deleted through v1's API is gone. */
export async function liveRollout(store: LightningStore, rolloutId: string): Promise<Rollout> {
  const rollout = await store.getRolloutById(rolloutId);
  if (!rollout || isDeleted(rollout)) throw notFound(rolloutId);
  return rollout;
}

/**
 * Runs the changes of one rollout one at a time: a PATCH reads the state, checks the transition
 * and then writes, and two controllers' PATCHes of one rollout must not interleave.
 */
function oneAtATimePerRollout() {
  const running = new Map<string, Promise<unknown>>();
  return <T>(rolloutId: string, change: () => Promise<T>): Promise<T> => {
    const previous = running.get(rolloutId) ?? Promise.resolve();
    const next = previous.catch(() => {}).then(change);
    running.set(rolloutId, next);
    const forget = () => running.get(rolloutId) === next && running.delete(rolloutId);
    next.then(forget, forget);
    return next;
  };
}

/**
 * Agent Lightning v1's rollout API (`/api/rollouts`) on agl's store: its controller lists the
 * queue and moves rollouts through their states, its trainer enqueues groups, follows the
 * terminal cursor and deletes what it has read.
 */
export function rolloutRoutes(store: LightningStore): Route[] {
  const serially = oneAtATimePerRollout();
  const answer = async (response: ServerResponse, status: number, rollout: Rollout) =>
    sendJson(response, status, v1RolloutOf(rollout, await store.getLatestAttempt(rollout.rollout_id)));

  return [
    {
      method: 'POST',
      path: '/api/rollouts',
      handle: async (request, response) => {
        const body = await readJson(request, BODY_LIMIT);
        checkNesting(body);
        const creates = parseRequest(rolloutCreates, body, UNPROCESSABLE);
        const rollouts = await store.enqueueManyRollouts(creates.map(rolloutRequestOf));
        const deleted = rollouts.find(isDeleted);
        if (deleted)
          throw new HttpError(
            409,
            `Rollout ${deleted.rollout_id} was deleted; its id cannot be used again (agl keeps its data)`,
          );
        sendJson(
          response,
          201,
          rollouts.map((rollout) => v1RolloutOf(rollout)),
        );
      },
    },
    {
      method: 'GET',
      path: '/api/rollouts',
      handle: async (request, response) => {
        const query = parseRequest(listQuery, arrayParams(request, 'state_in'), UNPROCESSABLE);
        const statuses = query.state_in.flatMap((state) => AGL_STATUSES_OF[state]);
        const found = await liveRollouts(store, statuses, query.limit);
        sendJson(
          response,
          200,
          found.map(([rollout, latest]) => v1RolloutOf(rollout, latest)),
        );
      },
    },
    {
      method: 'GET',
      path: '/api/rollouts/terminal',
      handle: async (request, response) => {
        const query = parseRequest(terminalQuery, queryObject(request), UNPROCESSABLE);
        const after = Math.max(0, query.after);
        const limit = Math.min(Math.max(1, query.limit), 10_000);
        // The order rollouts ended in is v1's completion log; deleted ones keep their place.
        const page = await store.queryRollouts({
          status_in: ['succeeded', 'failed', 'cancelled'],
          sort_by: 'end_time',
          sort_order: 'asc',
          offset: after,
          limit,
        });
        sendJson(response, 200, {
          items: page.items.filter((rollout) => !isDeleted(rollout)).map(terminalItemOf),
          next_after: after + page.items.length,
          total_terminal: page.total,
        });
      },
    },
    {
      method: 'GET',
      path: '/api/rollouts/{rollout_id}',
      handle: async (_request, response, [rolloutId]) => {
        const rollout = await liveRollout(store, rolloutId);
        const attempts = (await store.queryAttempts(rolloutId)).items;
        sendJson(response, 200, {
          rollout: v1RolloutOf(rollout, attempts.at(-1) ?? null),
          attempts: attempts.map((attempt) => attempt.attempt_id),
        });
      },
    },
    {
      method: 'PATCH',
      path: '/api/rollouts/{rollout_id}',
      handle: async (request, response, [rolloutId]) => {
        const body = parseRequest(rolloutPatch, await readJsonObject(request, 64 * 1024), UNPROCESSABLE);
        const rollout = await serially(rolloutId, () => patchRollout(store, rolloutId, body.status ?? {}));
        await answer(response, 200, rollout);
      },
    },
    {
      method: 'DELETE',
      path: '/api/rollouts/{rollout_id}',
      handle: async (_request, response, [rolloutId]) => {
        await serially(rolloutId, () => deleteRollout(store, rolloutId));
        response.writeHead(204).end();
      },
    },
  ];
}

/** Query parameters with `name` always a list (FastAPI's `list[...] = Query()`). */
function arrayParams(request: IncomingMessage, name: string): Record<string, unknown> {
  const query = queryObject(request);
  const value = query[name];
  return { ...query, [name]: value === undefined ? [] : Array.isArray(value) ? value : [value] };
}

/** Up to `limit` rollouts in `statuses` that v1's API still shows, in the order they were made. */
async function liveRollouts(store: LightningStore, statuses: Rollout['status'][], limit: number) {
  const found: [Rollout, Attempt | null][] = [];
  for (let offset = 0; found.length < limit; offset += limit) {
    const page = await store.queryRollouts({ status_in: statuses, sort_by: 'start_time', offset, limit });
    for (const rollout of page.items)
      if (!isDeleted(rollout) && found.length < limit)
        found.push([rollout, 'attempt' in rollout ? rollout.attempt : null]);
    if (offset + page.items.length >= page.total || page.items.length === 0) break;
  }
  return found;
}

function terminalItemOf(rollout: Rollout) {
  const input = rollout.input as Record<string, unknown> | null;
  const dataId =
    input !== null && typeof input === 'object' && !Array.isArray(input) ? input.data_id || input.instance_id : '';
  return {
    rollout_id: rollout.rollout_id,
    state: v1StateOf(rollout.status),
    data_id: dataId ? String(dataId) : '',
    is_train: rollout.mode !== 'val' && rollout.mode !== 'test',
  };
}

/**
 * v1's PATCH on agl's state machine: queuing -> running starts the attempt v1 names (its
 * `last_attempt_id`, else "0"), running -> succeeded|failed ends the latest attempt, queuing ->
 * failed fails the rollout; every patch moves v1's version on.
 */
async function patchRollout(store: LightningStore, rolloutId: string, patch: V1StatusPatch): Promise<Rollout> {
  let rollout = await liveRollout(store, rolloutId);
  if (Object.keys(patch).length === 0) return rollout;
  const kept = bookkeepingOf(rollout);
  const next = {
    ...kept,
    ...('k8s_job_name' in patch ? { k8s_job_name: patch.k8s_job_name ?? null } : {}),
    ...('last_attempt_id' in patch ? { last_attempt_id: patch.last_attempt_id ?? null } : {}),
    ...('error_message' in patch ? { error_message: patch.error_message ?? null } : {}),
    version: kept.version + 1,
    updated_at: Date.now() / 1000,
  };
  if (patch.state !== undefined) {
    const from = v1StateOf(rollout.status);
    const refused = new HttpError(409, `Rollout ${rolloutId}: cannot transition ${from} -> ${patch.state}`);
    if (!V1_TRANSITIONS[from].includes(patch.state)) throw refused;
    if (from === 'queuing' && patch.state === 'running') {
      try {
        await store.startAttempt(rolloutId, null, next.last_attempt_id ?? DEFAULT_ATTEMPT_ID);
      } catch (error) {
        // Another server took it between the read and the start (state in PostgreSQL).
        if (error instanceof ConflictError) throw refused;
        throw error;
      }
    } else if (from === 'running') {
      await store.updateAttempt(rolloutId, 'latest', { status: patch.state === 'succeeded' ? 'succeeded' : 'failed' });
    } else {
      return store.updateRollout(rolloutId, { status: 'failed', metadata: metadataWith(rollout, next) });
    }
    rollout = (await store.getRolloutById(rolloutId)) ?? rollout;
  }
  return store.updateRollout(rolloutId, { metadata: metadataWith(rollout, next) });
}

/**
 * v1's DELETE: the rollout leaves v1's API (404 from now on, and out of every list), and one
 * not finished is cancelled; its spans, calls and rewards stay in agl's store, which is what
 * agl keeps them for (v1 deletes to bound its memory). Deleting what is not there is no error.
 */
async function deleteRollout(store: LightningStore, rolloutId: string): Promise<void> {
  const rollout = await store.getRolloutById(rolloutId);
  if (!rollout || isDeleted(rollout)) return;
  const deleted = { ...bookkeepingOf(rollout), deleted: true as const, updated_at: Date.now() / 1000 };
  const state = v1StateOf(rollout.status);
  if (state === 'running') await store.updateAttempt(rolloutId, 'latest', { status: 'cancelled' });
  await store.updateRollout(rolloutId, {
    metadata: metadataWith(rollout, deleted),
    ...(state === 'queuing' ? { status: 'cancelled' as const } : {}),
  });
}
