import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { QueryClient } from '../../src/client/query-client.js';
import { StoreClient } from '../../src/client/store-client.js';

// StoreClient retries requests the server did not answer, but a call that creates something
// (enqueue, a new attempt, resources) only when it never reached the server: an answer lost
// after the server acted must not enqueue the rollout twice.

const listen = (server: Server, port = 0) =>
  new Promise<number>((resolve) =>
    server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)),
  );
const close = (server: Server) =>
  new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections(); // the client's keep-alive connections would hold it open
  });

test('a lost answer is retried for reads, not for an enqueue; a refused connection is retried for both', async () => {
  const seen: string[] = [];
  // Reads each request, then drops the connection without an answer.
  const dropping = createServer((request) => {
    seen.push(`${request.method} ${request.url}`);
    request.resume();
    request.on('end', () => request.socket.destroy());
  });
  const port = await listen(dropping);
  try {
    const client = new StoreClient(`http://127.0.0.1:${port}`, { retryDelaysSeconds: [0.01, 0.01] });
    await assert.rejects(
      client.enqueueRollout({ input: 1 }),
      /did not answer POST \/queues\/rollouts\/enqueue: other side closed/,
    );
    assert.deepEqual(seen, ['POST /v1/agl/queues/rollouts/enqueue'], 'sent once');
    await assert.rejects(client.getLatestResources(), /did not answer GET/);
    assert.equal(seen.filter((line) => line.startsWith('GET')).length, 3, 'a read is tried again');
  } finally {
    await close(dropping);
  }

  // Nothing listens at first: the enqueue is retried, and the server that comes up answers it.
  const answering = createServer((request, response) => {
    request.resume();
    request.on('end', () =>
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify([{ rollout_id: 'ro-later' }])),
    );
  });
  const late = new StoreClient(`http://127.0.0.1:${port}`, { retryDelaysSeconds: [0.3] });
  const enqueued = late.enqueueRollout({ input: 2 });
  await listen(answering, port);
  try {
    assert.equal((await enqueued).rollout_id, 'ro-later');
  } finally {
    await close(answering);
  }
});

test('QueryClient follows the same rules: a lost answer to a query is sent again, a 503 waited for', async () => {
  const seen: string[] = [];
  const flaky = createServer((request, response) => {
    seen.push(`${request.method} ${request.url}`);
    request.resume();
    request.on('end', () => {
      if (seen.length === 1) request.socket.destroy();
      else if (seen.length === 2) response.writeHead(503, { 'retry-after': '0' }).end('{"detail":"busy"}');
      else
        response
          .writeHead(200, { 'content-type': 'application/json' })
          .end('{"columns":[{"name":"n","type":"BIGINT"}],"rows":[{"n":12345678901234567890}]}');
    });
  });
  const port = await listen(flaky);
  try {
    const client = new QueryClient(`http://127.0.0.1:${port}`, { retryDelaysSeconds: [0.01, 0.01] });
    const result = await client.query('SELECT 1');
    assert.equal(JSON.stringify(result.rows), '[{"n":12345678901234567890}]', 'integers beyond 2^53 exact');
    assert.deepEqual(seen, ['POST /v1/agl/query', 'POST /v1/agl/query', 'POST /v1/agl/query']);
  } finally {
    await close(flaky);
  }
});
