import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { connect, constants } from 'node:http2';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { exportClient, exportOnce, healthCheck } from '../support/grpc-client.js';
import {
  FIXTURES,
  freePort,
  newTempDir,
  post,
  removeDir,
  restartAfterKill,
  spawnServe,
  startAgl,
  tempDir,
  type InProcessAgl,
  spanCount,
} from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

// Bad input over OTLP/gRPC must get a gRPC error status that says why, and must never harm the
// server or what it stored before; an answered export survives kill -9.

const MAX_MESSAGE = 1024 * 1024;

let dir: string;
let agl: InProcessAgl;
let address: string;
let storedBefore: number;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'grpc-faults.duckdb'), { maxBodyBytes: MAX_MESSAGE, grpcPort: 0 });
  address = agl.server.grpcAddress as string;
  const ok = await exportOnce(address, 'traces', await readFile(join(FIXTURES, 'traces.pb')));
  assert.equal(ok.error, undefined);
  storedBefore = await spanCount(agl.store);
  assert.ok(storedBefore > 0);
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

/** The server still serves and the spans stored before are all there. */
async function assertUnharmed(): Promise<void> {
  assert.deepEqual(await healthCheck(address), { status: 1 });
  assert.equal(await spanCount(agl.store), storedBefore);
}

test('random bytes are INVALID_ARGUMENT naming the message', async () => {
  const random = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919 + 13) % 256));
  const { error } = await exportOnce(address, 'traces', random);
  assert.equal(error?.code, status.INVALID_ARGUMENT);
  assert.match(error?.details ?? '', /not a valid ExportTraceServiceRequest/);
  await assertUnharmed();
});

test('fields of the wrong types (spans sent to LogsService) are INVALID_ARGUMENT', async () => {
  const { body } = await makeBatch(3);
  const { error } = await exportOnce(address, 'logs', body);
  assert.equal(error?.code, status.INVALID_ARGUMENT);
  assert.match(error?.details ?? '', /not a valid ExportLogsServiceRequest: unsupported wire type/);
  await assertUnharmed();
});

test('a message over the cap is RESOURCE_EXHAUSTED', async () => {
  const { error } = await exportOnce(address, 'traces', Buffer.alloc(MAX_MESSAGE + 1));
  assert.equal(error?.code, status.RESOURCE_EXHAUSTED);
  assert.match(error?.details ?? '', /larger than max \(1048577 vs\.? 1048576\)/);
  await assertUnharmed();
});

test('a gzip bomb is RESOURCE_EXHAUSTED once it inflates past the cap', async () => {
  // 64 MiB of zeros, about 64 KiB gzipped: inflated as a stream, it is stopped at 1 MiB.
  const { error } = await exportOnce(address, 'traces', Buffer.alloc(64 * MAX_MESSAGE), {
    channel: { 'grpc.default_compression_algorithm': 2 },
  });
  assert.equal(error?.code, status.RESOURCE_EXHAUSTED);
  assert.match(error?.details ?? '', /decompresses to a size larger than 1048576/);
  await assertUnharmed();
});

/** One gRPC call over a bare HTTP/2 client, with a message frame made by hand: its grpc-status and grpc-message. */
async function rawCall(
  path: string,
  frame: Buffer,
  headers: Record<string, string>,
): Promise<{ status: number; message: string }> {
  const session = connect(`http://${address}`);
  try {
    return await new Promise((resolve, reject) => {
      const stream = session.request({
        [constants.HTTP2_HEADER_METHOD]: 'POST',
        [constants.HTTP2_HEADER_PATH]: path,
        'content-type': 'application/grpc',
        te: 'trailers',
        ...headers,
      });
      let answer: Record<string, unknown> = {};
      const settle = (fields: Record<string, unknown>) => {
        answer = { ...answer, ...fields };
        if (answer['grpc-status'] !== undefined)
          resolve({ status: Number(answer['grpc-status']), message: decodeURI(String(answer['grpc-message'])) });
      };
      stream.on('response', settle);
      stream.on('trailers', settle);
      stream.on('error', reject);
      stream.resume();
      stream.end(frame);
    });
  } finally {
    session.close();
  }
}

/** A gRPC message frame: the compressed flag, the length, the bytes. */
function frame(compressed: boolean, message: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header[0] = compressed ? 1 : 0;
  header.writeUInt32BE(message.length, 1);
  return Buffer.concat([header, message]);
}

test('corrupt gzip gets an error status (grpc-js: INTERNAL) and harms nothing', async () => {
  const message = frame(true, Buffer.from('this is not gzip at all'));
  const answer = await rawCall('/opentelemetry.proto.collector.trace.v1.TraceService/Export', message, {
    'grpc-encoding': 'gzip',
  });
  assert.equal(answer.status, status.INTERNAL);
  assert.match(answer.message, /Failed to decompress message/);
  await assertUnharmed();
});

test('spans with invalid ids are rejected in partial_success, which the official deserializer reads', async () => {
  const template = await makeBatch(3);
  const body = freshCopy(template, 77);
  // Zero the first span id in place: that span becomes invalid.
  const spanIdTag = body.indexOf(Buffer.from([0x12, 0x08]), template.traceIdOffsets[0]);
  body.fill(0, spanIdTag + 2, spanIdTag + 10);
  const { response, error } = await exportOnce(address, 'traces', body);
  assert.equal(error, undefined);
  const decoded = ProtobufTraceSerializer.deserializeResponse(response as Buffer);
  assert.equal(Number(decoded.partialSuccess?.rejectedSpans), 1);
  assert.match(decoded.partialSuccess?.errorMessage ?? '', /invalid span_id/);
  assert.equal(await spanCount(agl.store), storedBefore + 2);
  storedBefore += 2;
});

test('an empty request is a success with an empty response', async () => {
  const { response, error } = await exportOnce(address, 'traces', Buffer.alloc(0));
  assert.equal(error, undefined);
  assert.equal(response?.length, 0);
  await assertUnharmed();
});

test('spans re-delivered over gRPC, or first sent over HTTP, are stored once', async () => {
  const template = await makeBatch(20, { rolloutId: 'ro-redelivered' });
  const body = freshCopy(template, 4242);
  const client = exportClient(address, 'traces');
  const outcomes = await Promise.all([1, 2, 3].map(() => client.send(body)));
  client.close();
  assert.deepEqual(
    outcomes.map((o) => o.error),
    [undefined, undefined, undefined],
  );
  assert.equal((await post(`${agl.url}/v1/traces`, body, { 'content-type': 'application/x-protobuf' })).status, 200);
  assert.equal(await spanCount(agl.store), storedBefore + 20);
  storedBefore += 20;
});

test('answered exports survive SIGKILL of the server right after the OK', async (t) => {
  const db = join(await tempDir(t), 'grpc-durable.duckdb');
  const template = await makeBatch(300, { rolloutId: 'ro-durable' });
  const first = await spawnServe(['--db', db, '--grpc-port', String(await freePort())]);
  t.after(() => first.child.kill('SIGKILL'));
  const outcomes = await Promise.all(
    [1, 2, 3, 4].map((i) => exportOnce(first.grpcAddress as string, 'traces', freshCopy(template, i))),
  );
  assert.deepEqual(
    outcomes.map((o) => o.error?.message),
    [undefined, undefined, undefined, undefined],
  );
  const { stored } = await restartAfterKill(t, first, db);
  assert.deepEqual(stored, { n: 1200, last: 1200 });
});
