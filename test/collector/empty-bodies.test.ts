import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { newTempDir, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';

// Programs post their defaults with no body at all, each HTTP library labelling that its own way.
// An absent body is empty whatever its label; a body that is there must still be JSON.

/** The headers each client sends on a POST with no body, as they send them by default. */
const CLIENTS: Record<string, string[]> = {
  aiohttp: ['Content-Type: application/octet-stream', 'Content-Length: 0'],
  requests: ['Content-Length: 0'],
  httpx: ['Content-Length: 0'],
  curl: [],
};

let dir: string;
let agl: InProcessAgl;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'empty.duckdb'));
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

/** A request written byte for byte, so that no library adds or drops a header. */
function rawPost(path: string, headers: string[], body = ''): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(agl.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.once('error', reject);
    socket.once('end', () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
      resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
    });
    const head = [`POST ${path} HTTP/1.1`, `Host: ${hostname}:${port}`, 'Connection: close', ...headers];
    socket.write(`${head.join('\r\n')}\r\n\r\n${body}`);
  });
}

async function newRollout(): Promise<string> {
  return (await agl.store.lightning.enqueueRollout({ input: { q: 1 } })).rollout_id;
}

/** Every route whose body may be left out, and the status it answers then. */
async function emptyBodyRoutes(): Promise<[string, number][]> {
  const rollout = await newRollout();
  await agl.store.lightning.dequeueRollout();
  return [
    [`/v1/agl/rollouts/${await newRollout()}/attempts`, 201],
    [`/v1/agl/rollouts/${rollout}/attempts/search`, 200],
    [`/v1/agl/rollouts/${rollout}`, 200],
    ['/v1/agl/queues/rollouts/dequeue', 200],
    ['/v1/agl/rollouts/search', 200],
    ['/v1/agl/workers/search', 200],
    ['/v1/agl/workers/w-empty', 200],
    ['/v1/agl/resources/search', 200],
  ];
}

test('a POST with no body is answered whatever Content-Type the client labels it with', async () => {
  for (const [client, headers] of Object.entries(CLIENTS)) {
    for (const [path, status] of await emptyBodyRoutes()) {
      const answer = await rawPost(path, headers);
      assert.equal(answer.status, status, `${client} POST ${path}: ${answer.body}`);
    }
  }
});

test("Node's fetch with no body starts an attempt and updates a worker", async () => {
  const rollout = await newRollout();
  const started = await fetch(`${agl.url}/v1/agl/rollouts/${rollout}/attempts`, { method: 'POST' });
  assert.equal(started.status, 201);
  assert.equal(((await started.json()) as { rollout_id: string }).rollout_id, rollout);
  const worker = await fetch(`${agl.url}/v1/agl/workers/w-fetch`, { method: 'POST' });
  assert.equal(worker.status, 200);
  assert.equal(((await worker.json()) as { worker_id: string }).worker_id, 'w-fetch');
});

test('a body that is there must still be JSON, whatever else the request says', async () => {
  const rollout = await newRollout();
  const path = `/v1/agl/rollouts/${rollout}/attempts`;
  const octets = await rawPost(path, ['Content-Type: application/octet-stream', 'Content-Length: 2'], '{}');
  assert.equal(octets.status, 415);
  assert.match(
    JSON.parse(octets.body).detail,
    /takes Content-Type: application\/json, not "application\/octet-stream"/,
  );
  const chunked = await rawPost(
    path,
    ['Content-Type: application/octet-stream', 'Transfer-Encoding: chunked'],
    '2\r\n{}\r\n0\r\n\r\n',
  );
  assert.equal(chunked.status, 415);
  assert.equal((await agl.store.lightning.queryAttempts(rollout)).total, 0);
  // A page's empty post is still refused for its Origin.
  const fromPage = await rawPost(path, ['Origin: http://evil.example', 'Content-Length: 0']);
  assert.equal(fromPage.status, 403);
  assert.equal((await agl.store.lightning.queryAttempts(rollout)).total, 0);
});
