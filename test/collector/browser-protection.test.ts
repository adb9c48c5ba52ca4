import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { newTempDir, removeDir, startAgl, tempDir, type InProcessAgl } from '../support/helpers.js';

// Any web page the user visits can make the browser send requests to a local agl: the server
// must refuse what a page could send it, and still serve programs and allowed pages.

const APP = 'http://app.example:3000';
const JSON_TYPE = { 'content-type': 'application/json' };
const SPAN = JSON.stringify({
  resourceSpans: [
    {
      scopeSpans: [
        { spans: [{ traceId: '5b8efff798038103d269b633813fc60c', spanId: 'eee19b7ec3c1b174', name: 'from-a-page' }] },
      ],
    },
  ],
});
const LLM = JSON.stringify({ llm: { resource_type: 'llm', endpoint: 'http://evil.example/v1', model: 'stolen' } });

let dir: string;
let agl: InProcessAgl;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'browser.duckdb'), { allowOrigins: [APP] });
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A raw request (fetch would not send a Host of our choosing). */
function send(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}${path}`, { method, headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.once('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: text }));
    });
    request.once('error', reject);
    request.end(body);
  });
}

const detail = (answer: Answer): string => JSON.parse(answer.body).detail;
const latestResources = async () => agl.store.lightning.getLatestResources();
const queuedCount = async () => (await agl.store.lightning.queryRollouts({ status_in: ['queuing'] })).total;

test('a text/plain or form post (no preflight in a browser) is a 415 and stores nothing', async () => {
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    const answer = await send(agl.url, 'POST', '/v1/agl/resources', { 'content-type': type }, LLM);
    assert.equal(answer.status, 415, type);
    assert.match(detail(answer), /POST \/v1\/agl\/resources takes Content-Type: application\/json, not "/);
  }
  assert.equal(await latestResources(), null);
  const query = await send(agl.url, 'POST', '/v1/agl/query', { 'content-type': 'text/plain' }, '{"sql":"SELECT 1"}');
  assert.equal(query.status, 415);
  const gateway = await send(
    agl.url,
    'POST',
    '/v1/gateway/v1/chat/completions',
    { 'content-type': 'text/plain' },
    '{}',
  );
  assert.equal(gateway.status, 415);
  const noType = await send(agl.url, 'POST', '/v1/agl/queues/rollouts/enqueue', {}, '{"rollouts":[{"input":1}]}');
  assert.equal(noType.status, 415);
  assert.match(detail(noType), /takes Content-Type: application\/json, a body without one/);
  assert.equal(await queuedCount(), 0);
});

test('a request from another origin is a 403 naming the origin and --allow-origin, and stores nothing', async () => {
  const evil = await send(agl.url, 'POST', '/v1/agl/resources', { ...JSON_TYPE, origin: 'http://evil.example' }, LLM);
  assert.equal(evil.status, 403);
  assert.match(detail(evil), /http:\/\/evil\.example.*--allow-origin http:\/\/evil\.example/);
  assert.equal(evil.headers['access-control-allow-origin'], undefined);
  // Another port of this very host is another origin (another local web app).
  const port = new URL(agl.url).port;
  const sibling = await send(
    agl.url,
    'POST',
    '/v1/agl/queues/rollouts/enqueue',
    { ...JSON_TYPE, origin: 'http://127.0.0.1:1' },
    '{"rollouts":[{"input":1}]}',
  );
  assert.equal(sibling.status, 403);
  const opaque = await send(agl.url, 'POST', '/v1/traces', { ...JSON_TYPE, origin: 'null' }, SPAN);
  assert.equal(opaque.status, 403);
  assert.equal(await latestResources(), null);
  assert.equal(await queuedCount(), 0);
  // The server's own origin is let through.
  const own = await send(agl.url, 'GET', '/v1/agl/health', {
    origin: `http://127.0.0.1:${port}`,
    'sec-fetch-site': 'same-origin',
  });
  assert.equal(own.status, 200);
});

test('Sec-Fetch-Site: cross-site is a 403 even without an Origin', async () => {
  const answer = await send(
    agl.url,
    'POST',
    '/v1/agl/queues/rollouts/enqueue',
    { ...JSON_TYPE, 'sec-fetch-site': 'cross-site' },
    '{"rollouts":[{"input":1}]}',
  );
  assert.equal(answer.status, 403);
  assert.match(detail(answer), /Sec-Fetch-Site: cross-site.*--allow-origin/);
  assert.equal(await queuedCount(), 0);
  for (const site of ['same-origin', 'same-site', 'none']) {
    assert.equal((await send(agl.url, 'GET', '/v1/agl/health', { 'sec-fetch-site': site })).status, 200, site);
  }
});

test('on a loopback address, a Host that is not a loopback name is a 421 (DNS rebinding)', async () => {
  const port = new URL(agl.url).port;
  const rebound = await send(
    agl.url,
    'POST',
    '/v1/agl/resources',
    { ...JSON_TYPE, host: `evil.example:${port}`, origin: `http://evil.example:${port}` },
    LLM,
  );
  assert.equal(rebound.status, 421);
  assert.match(detail(rebound), /Host "evil\.example:\d+"/);
  assert.equal((await send(agl.url, 'GET', '/v1/agl/health', { host: 'evil.example' })).status, 421);
  assert.equal(await latestResources(), null);
  for (const host of [
    `localhost:${port}`,
    'LOCALHOST',
    `127.0.0.1:${port}`,
    `127.1.2.3:${port}`,
    `[::1]:${port}`,
    'app.localhost',
  ]) {
    assert.equal((await send(agl.url, 'GET', '/v1/agl/health', { host })).status, 200, host);
  }
});

test('bound to a non-loopback address, any Host is answered', async (t) => {
  const open = await startAgl(join(await tempDir(t), 'open.duckdb'), { host: '0.0.0.0' });
  t.after(() => open.close());
  const url = `http://127.0.0.1:${new URL(open.url).port}`;
  assert.equal((await send(url, 'GET', '/v1/agl/health', { host: 'agl.internal.example:4318' })).status, 200);
});

test('an allowed origin gets CORS: its preflight and then its OTLP export', async () => {
  const preflight = await send(agl.url, 'OPTIONS', '/v1/traces', {
    origin: APP,
    'access-control-request-method': 'POST',
    'access-control-request-headers': 'content-type,x-custom',
    'sec-fetch-site': 'cross-site',
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers['access-control-allow-origin'], APP);
  assert.match(preflight.headers['access-control-allow-methods'] ?? '', /POST/);
  assert.equal(preflight.headers['access-control-allow-headers'], 'content-type,x-custom');
  assert.equal(preflight.headers.vary, 'Origin');
  assert.equal(preflight.headers['access-control-allow-credentials'], 'true', 'sendBeacon posts with credentials');
  assert.ok(Number(preflight.headers['access-control-max-age']) > 0);
  const plain = await send(agl.url, 'OPTIONS', '/v1/traces', { origin: APP, 'access-control-request-method': 'POST' });
  assert.match(plain.headers['access-control-allow-headers'] ?? '', /content-type.*authorization/);

  const exported = await send(
    agl.url,
    'POST',
    '/v1/traces',
    { ...JSON_TYPE, origin: APP, 'sec-fetch-site': 'cross-site' },
    SPAN,
  );
  assert.equal(exported.status, 200);
  assert.equal(exported.headers['access-control-allow-origin'], APP);
  const { rows } = await agl.store.query("SELECT name FROM spans WHERE name = 'from-a-page'");
  assert.equal(rows.length, 1);

  const refused = await send(agl.url, 'OPTIONS', '/v1/traces', {
    origin: 'http://evil.example',
    'access-control-request-method': 'POST',
  });
  assert.equal(refused.status, 403);
  assert.equal(refused.headers['access-control-allow-origin'], undefined);
});

test('with --token, a preflight needs no token but everything else does', async (t) => {
  const guarded = await startAgl(join(await tempDir(t), 'guarded.duckdb'), {
    token: 's3cret',
    allowOrigins: [`${APP}/`],
  });
  t.after(() => guarded.close());
  const preflight = await send(guarded.url, 'OPTIONS', '/v1/traces', {
    origin: APP,
    'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization, content-type',
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers['access-control-allow-origin'], APP);
  assert.equal((await send(guarded.url, 'POST', '/v1/traces', { ...JSON_TYPE, origin: APP }, SPAN)).status, 401);
  assert.equal((await send(guarded.url, 'OPTIONS', '/v1/traces', { origin: APP })).status, 401);
  const exported = await send(
    guarded.url,
    'POST',
    '/v1/traces',
    { ...JSON_TYPE, origin: APP, authorization: 'Bearer s3cret' },
    SPAN,
  );
  assert.equal(exported.status, 200);
  assert.equal(exported.headers['access-control-allow-origin'], APP);
});

test('programs (no Origin) keep working, and an empty post with no type is a default', async () => {
  const enqueued = await send(
    agl.url,
    'POST',
    '/v1/agl/queues/rollouts/enqueue',
    JSON_TYPE,
    '{"rollouts":[{"input":{"q":1}}]}',
  );
  assert.equal(enqueued.status, 201);
  assert.equal(enqueued.headers['access-control-allow-origin'], undefined);
  // Agent Lightning's Python client (aiohttp, json=None) posts defaults with no body and no type.
  const dequeued = await send(agl.url, 'POST', '/v1/agl/queues/rollouts/dequeue', { 'content-length': '0' });
  assert.equal(dequeued.status, 200);
  assert.equal(JSON.parse(dequeued.body).length, 1);
  const charset = await send(
    agl.url,
    'POST',
    '/v1/agl/rollouts/search',
    { 'content-type': 'application/json; charset=utf-8' },
    '{}',
  );
  assert.equal(charset.status, 200);
  const protobuf = await send(agl.url, 'POST', '/v1/traces', { 'content-type': 'application/x-protobuf' }, '');
  assert.equal(protobuf.status, 200);
});
