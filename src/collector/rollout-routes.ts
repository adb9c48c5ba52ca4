import type { LightningStore } from '../api/lightning-store.js';
import {
  dequeueBody,
  enqueueBody,
  noParameters,
  rolloutQuery,
  rolloutUpdate,
  startRolloutBody,
  waitBody,
} from '../api/requests.js';
import type { Route } from './http.js';
import { create, get, post } from './rest-route.js';

/** The most a request waits for a rollout: a long poll never hangs for good. */
const MAX_WAIT_SECONDS = 60;

/** Rollouts and their queue: enqueue, dequeue, start, query, update, wait for them to finish. */
export function rolloutRoutes(store: LightningStore): Route[] {
  return [
    create('/queues/rollouts/enqueue', enqueueBody, ({ rollouts }) => store.enqueueManyRollouts(rollouts)),
    post('/queues/rollouts/dequeue', dequeueBody, (body) =>
      store.dequeueManyRollouts({
        limit: body.limit ?? 1,
        workerId: body.worker_id ?? null,
        waitSeconds: Math.min(MAX_WAIT_SECONDS, body.wait_seconds ?? 0),
      }),
    ),
    create('/rollouts', startRolloutBody, (body) => store.startRollout(body)),
    get('/rollouts', rolloutQuery, (query) => store.queryRollouts(query)),
    post('/rollouts/search', rolloutQuery, (query) => store.queryRollouts(query)),
    get('/rollouts/{id}', noParameters, (_, [id]) => store.getRolloutById(id)),
    post('/rollouts/{id}', rolloutUpdate, (update, [id]) => store.updateRollout(id, update)),
    post('/waits/rollouts', waitBody, (body) =>
      store.waitForRollouts(body.rollout_ids, Math.min(MAX_WAIT_SECONDS, body.timeout ?? MAX_WAIT_SECONDS)),
    ),
  ];
}
