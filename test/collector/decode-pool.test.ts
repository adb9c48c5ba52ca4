import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Worker } from 'node:worker_threads';
import { DecodePool } from '../../src/collector/decode-pool.js';
import { makeBatch } from '../support/otlp-batches.js';

// Bodies move to the decode threads without a copy when their memory is theirs alone (OTLP/HTTP
// bodies read into a buffer of their own, gRPC messages in grpc-js's frame buffer), and are
// copied otherwise: a view into a buffer others use must stay readable.

/** `body` as a view past a 5-byte prefix of a buffer of its own, as grpc-js hands a message. */
function inFrame(body: Buffer): Buffer {
  const frame = Buffer.alloc(body.length + 5);
  body.copy(frame, 5);
  return frame.subarray(5);
}

test('a view handed over with its whole buffer moves to the decode thread; without, it is copied', async (t) => {
  const pool = new DecodePool(1);
  t.after(() => pool.close());
  const { body, spanCount } = await makeBatch(200);
  assert.ok(body.length > 32 * 1024, 'large enough for a decode thread');

  const copied = inFrame(body);
  const fromCopy = await pool.decode('traces', 'protobuf', copied);
  assert.equal(fromCopy.rows.length, spanCount);
  assert.equal(copied.buffer.byteLength, body.length + 5, 'still readable');
  assert.deepEqual(copied, body);

  const moved = inFrame(body);
  const fromMoved = await pool.decode('traces', 'protobuf', moved, true);
  assert.equal(fromMoved.rows.length, spanCount);
  assert.equal(moved.buffer.byteLength, 0, 'transferred (detached here), not copied');
  assert.deepEqual(fromMoved, fromCopy);
});

test('a decode thread that dies fails the bodies it held and is replaced: nothing waits forever', async (t) => {
  const pool = new DecodePool(1);
  t.after(() => pool.close());
  const { body, spanCount } = await makeBatch(200);
  // Reach the thread as a crash would: from outside, while it holds a body.
  const { threads } = pool as unknown as { threads: { worker: Worker }[] };
  const held = pool.decode('traces', 'protobuf', Buffer.from(body));
  await threads[0].worker.terminate();
  // Settled either way: decoded before the end came, or failed with why.
  await held.then(
    (batch) => assert.equal(batch.rows.length, spanCount),
    (error: Error) => assert.match(error.message, /decode thread stopped/),
  );
  const next = await pool.decode('traces', 'protobuf', Buffer.from(body));
  assert.equal(next.rows.length, spanCount);
});
