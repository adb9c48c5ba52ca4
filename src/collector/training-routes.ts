import { trainingDoneBody, trainingNextQuery } from '../api/requests.js';
import type { TrainingBatchSource } from '../api/training.js';
import type { Route } from './http.js';
import { post, queryObject } from './rest-route.js';
import { parseRequest } from './validate.js';

/**
 * Training batches for an external trainer (docs/training.md), served while an algorithm that
 * hands batches out (GRPO) runs with this server: the next batch as an Arrow IPC stream, and its
 * done with the trainer's metrics and new model. Behind the same token check as every route.
 */
export function trainingRoutes(batches: TrainingBatchSource): Route[] {
  return [
    {
      method: 'GET',
      path: '/v1/agl/training/batches/next',
      handle: async (request, response) => {
        const { wait = 0 } = parseRequest(trainingNextQuery, queryObject(request));
        // A trainer that gives up its long poll must not be handed (and leased) a batch.
        const gone = new AbortController();
        response.once('close', () => gone.abort());
        const batch = await batches.next(wait, gone.signal);
        if (batch === null) {
          response.writeHead(204).end();
          return;
        }
        response.writeHead(200, {
          'content-type': 'application/vnd.apache.arrow.stream',
          'content-length': batch.body.byteLength,
          'agl-batch-id': batch.batchId,
          'agl-step': String(batch.step),
          'agl-model-version': batch.modelVersion,
          'agl-lease-seconds': String(batch.leaseSeconds),
        });
        response.end(batch.body);
      },
    },
    post('/training/batches/{batch_id}/done', trainingDoneBody, (done, [batchId]) => batches.done(batchId, done)),
  ];
}
