import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { FIXTURES, post, spanCount, startAgl, newTempDir, removeDir, type InProcessAgl } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

// Bad input must get the right status and a clear message, and must never harm the server or
// what it already stored.

const MAX_BODY = 1024 * 1024;
const PROTOBUF = { 'content-type': 'application/x-protobuf' };
const JSON_TYPE = { 'content-type': 'application/json' };

let dir: string;
let agl: InProcessAgl;
let storedBefore: number;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'faults.duckdb'), { maxBodyBytes: MAX_BODY });
  const ok = await post(`${agl.url}/v1/traces`, await readFile(join(FIXTURES, 'traces.pb')), PROTOBUF);
  assert.equal(ok.status, 200);
  storedBefore = await spanCount(agl.store);
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

/** The server still answers and the spans stored before are all there. */
async function assertUnharmed(): Promise<void> {
  const health = await fetch(`${agl.url}/v1/agl/health`);
  assert.deepEqual(await health.json(), { status: 'ok', backend: 'duckdb' });
  assert.equal(await spanCount(agl.store), storedBefore);
}

/** Decodes a protobuf google.rpc.Status {1: code, 2: message}. */
function rpcStatus(body: Buffer): { code: number; message: string } {
  assert.equal(body[0], 0x08, 'field 1, varint');
  const code = body[1];
  assert.equal(body[2], 0x12, 'field 2, length-delimited');
  let length = 0;
  let pos = 3;
  for (let shift = 0; ; shift += 7) {
    const b = body[pos++];
    length |= (b & 0x7f) << shift;
    if (b < 0x80) break;
  }
  return { code, message: body.subarray(pos, pos + length).toString() };
}

test('random bytes are a 400 with a protobuf google.rpc.Status that says why', async () => {
  const random = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 256));
  const response = await post(`${agl.url}/v1/traces`, random, PROTOBUF);
  assert.equal(response.status, 400);
  assert.equal(response.headers.get('content-type'), 'application/x-protobuf');
  const status = rpcStatus(response.body);
  assert.equal(status.code, 3);
  assert.match(status.message, /not a valid ExportTraceServiceRequest/);
  await assertUnharmed();
});

test('a truncated protobuf body is a 400 naming the truncation', async () => {
  const body = await readFile(join(FIXTURES, 'traces.pb'));
  const response = await post(`${agl.url}/v1/traces`, body.subarray(0, body.length - 7), PROTOBUF);
  assert.equal(response.status, 400);
  assert.match(rpcStatus(response.body).message, /truncated/);
  await assertUnharmed();
});

test('JSON with wrong types is a 400 with a JSON Status naming the field', async () => {
  const body = JSON.stringify({
    resourceSpans: [
      {
        scopeSpans: [
          { spans: [{ traceId: '5b8efff798038103d269b633813fc60c', spanId: 'eee19b7ec3c1b174', name: 42 }] },
        ],
      },
    ],
  });
  const response = await post(`${agl.url}/v1/traces`, body, JSON_TYPE);
  assert.equal(response.status, 400);
  assert.equal(response.headers.get('content-type'), 'application/json');
  const status = JSON.parse(response.body.toString());
  assert.equal(status.code, 3);
  assert.match(
    status.message,
    /resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\]\.name: expected a string, got a number/,
  );

  const notJson = await post(`${agl.url}/v1/traces`, '{"resourceSpans": [', JSON_TYPE);
  assert.equal(notJson.status, 400);
  assert.match(JSON.parse(notJson.body.toString()).message, /not JSON/);
  const notList = await post(`${agl.url}/v1/traces`, '{"resourceSpans": {}}', JSON_TYPE);
  assert.equal(notList.status, 400);
  assert.match(JSON.parse(notList.body.toString()).message, /resourceSpans: expected an array/);
  await assertUnharmed();
});

test('a gzip bomb is a 413, not an out-of-memory crash', async () => {
  const bomb = gzipSync(Buffer.alloc(64 * MAX_BODY));
  assert.ok(bomb.length < MAX_BODY / 4);
  const response = await post(`${agl.url}/v1/traces`, bomb, { ...PROTOBUF, 'content-encoding': 'gzip' });
  assert.equal(response.status, 413);
  assert.match(rpcStatus(response.body).message, /larger than 1048576 bytes \(after decompression\)/);
  await assertUnharmed();
});

test('a body over the cap is a 413', async () => {
  const response = await post(`${agl.url}/v1/traces`, Buffer.alloc(MAX_BODY + 1), PROTOBUF);
  assert.equal(response.status, 413);
  await assertUnharmed();
});

/** POSTs `body` in 64 KiB chunks (Transfer-Encoding: chunked); rejects when the connection is cut. */
function postChunked(
  url: string,
  body: Buffer,
  headers: Record<string, string>,
): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method: 'POST', headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.once('end', () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks) }));
      response.once('error', reject);
    });
    request.once('error', reject);
    for (let offset = 0; offset < body.length; offset += 64 * 1024)
      request.write(body.subarray(offset, offset + 64 * 1024));
    request.end();
  });
}

test('a chunked body over the cap is a 413 the client gets, plain or gzipped', async () => {
  const noise = randomBytes(3 * MAX_BODY);
  const plain = await postChunked(`${agl.url}/v1/traces`, noise, PROTOBUF);
  assert.equal(plain.status, 413);
  assert.match(rpcStatus(plain.body).message, /larger than 1048576 bytes/);
  const gzipped = await postChunked(`${agl.url}/v1/traces`, gzipSync(noise), {
    ...PROTOBUF,
    'content-encoding': 'gzip',
  });
  assert.equal(gzipped.status, 413);
  const store = await postChunked(`${agl.url}/v1/agl/query`, Buffer.alloc(3 * MAX_BODY, ' '), JSON_TYPE);
  assert.equal(store.status, 413);
  await assertUnharmed();
});

test('corrupt gzip and unknown encodings are 400s', async () => {
  const corrupt = await post(`${agl.url}/v1/traces`, Buffer.from('not gzip at all'), {
    ...PROTOBUF,
    'content-encoding': 'gzip',
  });
  assert.equal(corrupt.status, 400);
  assert.match(rpcStatus(corrupt.body).message, /not valid gzip/);
  const brotli = await post(`${agl.url}/v1/traces`, Buffer.from('x'), { ...PROTOBUF, 'content-encoding': 'br' });
  assert.equal(brotli.status, 400);
  assert.match(rpcStatus(brotli.body).message, /unsupported Content-Encoding "br"/);
  await assertUnharmed();
});

test('an unsupported content type is a 415 that names the accepted ones', async () => {
  for (const path of ['/v1/traces', '/v1/logs', '/v1/metrics']) {
    const response = await post(`${agl.url}${path}`, 'hello', { 'content-type': 'text/plain' });
    assert.equal(response.status, 415);
    assert.match(
      JSON.parse(response.body.toString()).message,
      /unsupported Content-Type "text\/plain".*application\/x-protobuf, application\/protobuf or application\/json/,
    );
  }
  await assertUnharmed();
});

test('spans with invalid ids are rejected one by one in partial_success; the others are stored', async () => {
  const body = JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'agentlightning.rollout_id', value: { stringValue: 'ro-partial' } }] },
        scopeSpans: [
          {
            spans: [
              { traceId: '5b8efff798038103d269b633813fc60c', spanId: 'eee19b7ec3c1b174', name: 'good' },
              { traceId: '5b8efff798038103d269b633813fc60c', spanId: '0000000000000000', name: 'zero-id' },
              { traceId: 'W47/95gDgQPSabYzgT/GDA==', spanId: '7uGbfsPBsXU=', name: 'base64-ids', parentSpanId: '' },
            ],
          },
        ],
      },
    ],
  });
  const response = await post(`${agl.url}/v1/traces`, body, JSON_TYPE);
  assert.equal(response.status, 200);
  const answer = JSON.parse(response.body.toString());
  assert.equal(answer.partialSuccess.rejectedSpans, '1');
  assert.match(answer.partialSuccess.errorMessage, /span "zero-id": invalid span_id/);
  const { rows } = await agl.store.query(
    "SELECT name, trace_id, span_id FROM spans WHERE rollout_id = 'ro-partial' ORDER BY name",
  );
  assert.deepEqual(rows, [
    { name: 'base64-ids', trace_id: '5b8efff798038103d269b633813fc60c', span_id: 'eee19b7ec3c1b175' },
    { name: 'good', trace_id: '5b8efff798038103d269b633813fc60c', span_id: 'eee19b7ec3c1b174' },
  ]);
  storedBefore = await spanCount(agl.store);
});

test('partial_success in protobuf decodes with the official deserializer', async () => {
  const template = await makeBatch(3);
  // Zero the first span id in place: that span becomes invalid.
  const body = freshCopy(template, 77);
  const spanIdTag = body.indexOf(Buffer.from([0x12, 0x08]), template.traceIdOffsets[0]);
  body.fill(0, spanIdTag + 2, spanIdTag + 10);
  const response = await post(`${agl.url}/v1/traces`, body, PROTOBUF);
  assert.equal(response.status, 200);
  const decoded = ProtobufTraceSerializer.deserializeResponse(response.body);
  assert.equal(Number(decoded.partialSuccess?.rejectedSpans), 1);
  assert.match(decoded.partialSuccess?.errorMessage ?? '', /invalid span_id/);
  storedBefore = await spanCount(agl.store);
});

test('an empty request is a success', async () => {
  const proto = await post(`${agl.url}/v1/traces`, Buffer.alloc(0), PROTOBUF);
  assert.equal(proto.status, 200);
  assert.equal(proto.body.length, 0);
  const json = await post(`${agl.url}/v1/traces`, '{}', JSON_TYPE);
  assert.equal(json.status, 200);
  assert.deepEqual(JSON.parse(json.body.toString()), {});
  await assertUnharmed();
});

test('re-delivered spans are stored once', async () => {
  const body = await readFile(join(FIXTURES, 'traces.pb'));
  const again = await post(`${agl.url}/v1/traces`, body, PROTOBUF);
  assert.equal(again.status, 200);
  const gzipped = await post(`${agl.url}/v1/traces`, gzipSync(body), { ...PROTOBUF, 'content-encoding': 'gzip' });
  assert.equal(gzipped.status, 200);
  const concurrent = await Promise.all([1, 2, 3].map(() => post(`${agl.url}/v1/traces`, body, PROTOBUF)));
  assert.deepEqual(
    concurrent.map((r) => r.status),
    [200, 200, 200],
  );
  assert.equal(await spanCount(agl.store), storedBefore);
  const { rows } = await agl.store.query(
    'SELECT count(*) AS n FROM (SELECT DISTINCT trace_id, span_id, rollout_id, attempt_id FROM spans)',
  );
  assert.equal(rows[0].n, storedBefore);
});

test('unknown routes and methods get 404 and 405, broken percent-encoding a 400', async () => {
  assert.equal((await fetch(`${agl.url}/v1/nothing`)).status, 404);
  const wrongMethod = await fetch(`${agl.url}/v1/traces`);
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.headers.get('allow'), 'POST');
  // A route parameter that is not valid percent-encoding is a 400, and the server goes on.
  const broken = await fetch(`${agl.url}/v1/agl/rollouts/%E0%A4`);
  assert.equal(broken.status, 400);
  assert.match(((await broken.json()) as { detail: string }).detail, /not valid percent-encoding/);
  assert.equal((await fetch(`${agl.url}/v1/agl/health`)).status, 200);
});

test('a request larger than one DuckDB chunk keeps each span with its own resource', async () => {
  const group = (service: string, count: number, offset: number) => ({
    resource: { attributes: [{ key: 'service.name', value: { stringValue: service } }] },
    scopeSpans: [
      {
        scope: { name: `scope-${service}` },
        spans: Array.from({ length: count }, (_, i) => ({
          traceId: '7b8efff798038103d269b633813fc60c',
          spanId: (offset + i + 1).toString(16).padStart(16, '0'),
          name: `span-${offset + i}`,
          kind: (offset + i) % 6,
          attributes: [{ key: 'i', value: { intValue: String(offset + i) } }],
        })),
      },
    ],
  });
  const body = JSON.stringify({ resourceSpans: [group('svc-big-a', 2500, 0), group('svc-big-b', 700, 2500)] });
  assert.equal((await post(`${agl.url}/v1/traces`, body, JSON_TYPE)).status, 200);
  const { rows } = await agl.store.query(
    `SELECT service_name, scope_name, resource->>'service.name' AS resource_service, count(*) AS n,
            count(DISTINCT kind) AS kinds, min((attributes->>'i')::INT) AS lo, max((attributes->>'i')::INT) AS hi
     FROM spans WHERE service_name LIKE 'svc-big-%' GROUP BY ALL ORDER BY 1`,
  );
  assert.deepEqual(rows, [
    {
      service_name: 'svc-big-a',
      scope_name: 'scope-svc-big-a',
      resource_service: 'svc-big-a',
      n: 2500,
      kinds: 6,
      lo: 0,
      hi: 2499,
    },
    {
      service_name: 'svc-big-b',
      scope_name: 'scope-svc-big-b',
      resource_service: 'svc-big-b',
      n: 700,
      kinds: 6,
      lo: 2500,
      hi: 3199,
    },
  ]);
  storedBefore = await spanCount(agl.store);
});

test('metrics are acknowledged with a note that agl does not keep them', async () => {
  const response = await post(`${agl.url}/v1/metrics`, '{"resourceMetrics":[]}', JSON_TYPE);
  assert.equal(response.status, 200);
  assert.deepEqual(JSON.parse(response.body.toString()), {
    partialSuccess: { rejectedDataPoints: '0', errorMessage: 'agl stores traces and logs; metrics are not kept' },
  });
  await assertUnharmed();
});
