import type { LightningStore } from '../api/lightning-store.js';
import { attemptUpdate, noParameters, pagination, startAttemptBody } from '../api/requests.js';
import type { Route } from './http.js';
import { create, get, post } from './rest-route.js';

/** A rollout's attempts: start one, query them, update one (`latest` names the latest). */
export function attemptRoutes(store: LightningStore): Route[] {
  return [
    get('/rollouts/{id}/attempts/latest', noParameters, (_, [id]) => store.getLatestAttempt(id)),
    get('/rollouts/{id}/attempts', pagination, (query, [id]) => store.queryAttempts(id, query)),
    // Before /attempts/{attempt}, which "search" would match too.
    post('/rollouts/{id}/attempts/search', pagination, (query, [id]) => store.queryAttempts(id, query)),
    create('/rollouts/{id}/attempts', startAttemptBody, (body, [id]) =>
      store.startAttempt(id, body.worker_id ?? null, body.attempt_id),
    ),
    post('/rollouts/{id}/attempts/{attempt}', attemptUpdate, (update, [id, attempt]) =>
      store.updateAttempt(id, attempt, update),
    ),
  ];
}
