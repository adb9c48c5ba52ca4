import assert from 'node:assert/strict';
import { test } from 'node:test';
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
