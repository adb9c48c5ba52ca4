import type { LightningStore } from '../api/lightning-store.js';
import { noParameters } from '../api/requests.js';
import { attemptRoutes } from './attempt-routes.js';
import type { Route } from './http.js';
import { resourceRoutes } from './resource-routes.js';
import { get } from './rest-route.js';
import { rolloutRoutes } from './rollout-routes.js';
import { spanRoutes } from './span-routes.js';
import { workerRoutes } from './worker-routes.js';

/**
 * The LightningStore REST API under /v1/agl/, with Agent Lightning v0.x's routes, bodies and
 * status codes (201 for creations, null for an unknown id on GET, 404 for an unknown id on
 * updates, 400 naming the field of a bad body or query), one module per resource.
 */
export function storeRoutes(store: LightningStore): Route[] {
  return [
    ...rolloutRoutes(store),
    ...attemptRoutes(store),
    ...resourceRoutes(store),
    ...workerRoutes(store),
    ...spanRoutes(store),
    get('/statistics', noParameters, () => store.statistics()),
  ];
}
