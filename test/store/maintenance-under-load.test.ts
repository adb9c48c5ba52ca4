import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startAgl, tempDir, until } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

const PROTOBUF = { 'content-type': 'application/x-protobuf' };
/**
 * Two senders, each sending a request at most every 500 ms, half that apart: a span is
 * written about every 250 ms (the store is never idle for 500 ms), at a rate (up to 1,024
 * LLM-sized spans a second) that the deriver outruns even when the machine is shared with the
 * rest of the suite. Unbounded senders would measure how fast this machine derives against how
 * fast it ingests, not whether the store keeps up with load.
 */
const SENDERS = 2;
const SEND_EVERY_MS = 500;

const walBytes = (db: string): number => {
  try {
    return statSync(`${db}.wal`).size;
  } catch {
    return 0;
  }
};

test('under continuous ingest with no idle gap, the store still derives the spans and checkpoints the WAL', async (t) => {
  const db = join(await tempDir(t), 'loaded.duckdb');
  // Idle would mean 500 ms without a span written; the senders never leave such a gap. The
  // work starts under load after 1 s of it (30 s by default, so that a burst runs at full speed).
  // DuckDB's own threshold set out of reach: every shrink of the WAL is then the store's doing.
  const agl = await startAgl(db, { deriveWhenIdleMs: 500, maintainUnderLoadAfterMs: 1000, checkpointThreshold: '1TB' });
  let closed = false;
  t.after(() => closed || agl.close());
  const template = await makeBatch(256, { promptBytes: 4096 });

  let serial = 0;
  let acked = 0;
  let sending = true;
  const senders = Array.from({ length: SENDERS }, async (_, i) => {
    for (let next = Date.now() + (i * SEND_EVERY_MS) / SENDERS; sending; next += SEND_EVERY_MS) {
      await sleep(next - Date.now());
      const response = await fetch(`${agl.url}/v1/traces`, {
        method: 'POST',
        body: freshCopy(template, ++serial),
        headers: PROTOBUF,
      });
      assert.equal(response.status, 200, await response.text());
      await response.arrayBuffer().catch(() => {});
      acked += template.spanCount;
    }
  });
  const failed = Promise.all(senders).then(() => {});

  try {
    // The WAL shrinks once checkpointed under load (from 64 MB, sooner or later after refusals).
    let largest = 0;
    await Promise.race([
      failed,
      until(async () => {
        const size = walBytes(db);
        largest = Math.max(largest, size);
        assert.ok(largest >= 32 * 2 ** 20 && size < largest / 2, `WAL ${size} bytes, at most ${largest}`);
      }, 120_000),
    ]);
    // Every span acknowledged by now gets derived while the senders go on.
    const ackedBefore = acked;
    await Promise.race([
      failed,
      until(async () => {
        const { rows } = await agl.store.query('SELECT count(*) AS n FROM derived_calls', { guard: false });
        assert.ok(Number(rows[0].n) >= ackedBefore, `${rows[0].n} of ${ackedBefore} spans derived`);
      }, 120_000),
    ]);
    assert.ok(acked > ackedBefore, 'the senders were still sending');
  } finally {
    sending = false;
    await failed;
  }
  const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
  assert.equal(Number(rows[0].n), acked);
  closed = true;
  await agl.close();
});
