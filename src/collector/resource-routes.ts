import type { LightningStore } from '../api/lightning-store.js';
import { namedResources, noParameters, resourcesQuery } from '../api/requests.js';
import type { Route } from './http.js';
import { create, get, post } from './rest-route.js';

/** Named resources (LLM endpoints, prompt templates), each change a new version. */
export function resourceRoutes(store: LightningStore): Route[] {
  return [
    get('/resources', resourcesQuery, (query) => store.queryResources(query)),
    create('/resources', namedResources, (resources) => store.addResources(resources)),
    get('/resources/latest', noParameters, () => store.getLatestResources()),
    get('/resources/{id}', noParameters, (_, [id]) => store.getResourcesById(id)),
    post('/resources/{id}', namedResources, (resources, [id]) => store.updateResources(id, resources)),
  ];
}
