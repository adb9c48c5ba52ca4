import type { LightningStore } from '../api/lightning-store.js';
import { noParameters, workerQuery, workerUpdate } from '../api/requests.js';
import type { Route } from './http.js';
import { get, post } from './rest-route.js';

/** Workers: query them, read one, take a heartbeat. */
export function workerRoutes(store: LightningStore): Route[] {
  return [
    get('/workers', workerQuery, (query) => store.queryWorkers(query)),
    post('/workers/search', workerQuery, (query) => store.queryWorkers(query)),
    get('/workers/{id}', noParameters, (_, [id]) => store.getWorkerById(id)),
    post('/workers/{id}', workerUpdate, (body, [id]) => store.updateWorker(id, body.heartbeat_stats)),
  ];
}
