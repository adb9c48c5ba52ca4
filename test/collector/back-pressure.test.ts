import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { post, startAgl, tempDir } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

test('a full write queue answers 503 with Retry-After, and every acknowledged span is stored', async (t) => {
  // A queue bound of one byte: whatever arrives while a write waits for its commit is refused.
  const agl = await startAgl(join(await tempDir(t), 'pressure.duckdb'), { maxQueuedBytes: 1 });
  t.after(() => agl.close());
  const template = await makeBatch(200);
  const responses = await Promise.all(
    Array.from({ length: 16 }, (_, i) =>
      post(`${agl.url}/v1/traces`, freshCopy(template, i + 1), { 'content-type': 'application/x-protobuf' }),
    ),
  );
  const statuses = responses.map((r) => r.status);
  assert.ok(statuses.includes(200), `some writes succeed: ${statuses}`);
  assert.ok(statuses.includes(503), `some writes are refused: ${statuses}`);
  for (const refused of responses.filter((r) => r.status === 503)) {
    assert.equal(refused.headers.get('retry-after'), '1');
  }
  const accepted = statuses.filter((s) => s === 200).length;
  const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
  assert.equal(rows[0].n, accepted * template.spanCount);
});
