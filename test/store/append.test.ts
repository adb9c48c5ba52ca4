import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { spanRows } from '../../src/store/span-json.js';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { span } from '../support/span-fixtures.js';

// The writer packs the small batches of one group commit into shared data chunks, and gives
// large ones chunks of their own: every row must land with its own values and nulls.

test('small and large batches of one commit keep every value and every null', async () => {
  const dir = await newTempDir();
  const store = await DuckDBStore.open({ path: join(dir, 'append.duckdb'), deriveWhenIdleMs: Infinity });
  try {
    const batch = (n: number, size: number) =>
      Array.from({ length: size }, (_, i) =>
        span({
          name: `b${n}-${i}`,
          start: n * 10_000 + i + 1,
          end: n * 10_000 + i + 2,
          trace: n + 1,
          rollout_id: (n + i) % 3 === 0 ? null : `ro-${n}`,
          attempt_id: (n + i) % 3 === 0 ? null : 'at-1',
          // (The store numbers a rollout's spans that come without a sequence id.)
          parent_id: i % 2 === 0 ? null : 'ab'.repeat(8),
          sequence_id: (n + i) % 3 === 0 ? null : i + 1,
          resource: { attributes: { 'service.name': `svc-${n}` }, schema_url: '' },
        }),
      );
    // Sizes around the packing bound (256) and the chunk size (2048), all in one group commit.
    const batches = [1, 2, 3, 300, 1, 2047, 5, 2050, 2].map((size, n) => batch(n, size));
    await Promise.all(batches.map((spans) => store.writeSpans(spanRows(...spans), 1)));
    const { rows } = await store.query(
      'SELECT name, rollout_id, attempt_id, parent_id, sequence_id, service_name FROM spans ORDER BY start_time',
      { guard: false },
    );
    const expected = batches
      .flat()
      .sort((a, b) => (a.start_time ?? 0) - (b.start_time ?? 0))
      .map((s) => ({
        name: s.name,
        rollout_id: s.rollout_id,
        attempt_id: s.attempt_id,
        parent_id: s.parent_id,
        sequence_id: s.sequence_id,
        service_name: s.resource?.attributes['service.name'],
      }));
    assert.equal(rows.length, expected.length);
    assert.deepEqual(
      rows.map((r) => ({ ...r, sequence_id: r.sequence_id === null ? null : Number(r.sequence_id) })),
      expected,
    );
  } finally {
    await store.close();
    await removeDir(dir);
  }
});

test('short and long strings side by side come back equal, compare equal and group together', async () => {
  const dir = await newTempDir();
  const store = await DuckDBStore.open({ path: join(dir, 'strings.duckdb'), deriveWhenIdleMs: Infinity });
  try {
    // Up to 12 bytes DuckDB keeps a string inside its 16-byte header, longer ones elsewhere:
    // lengths around that bound, empty, and multi-byte characters on both sides of it.
    const names = [
      '',
      'a',
      'chat',
      'exactly-12by',
      'thirteen-byte',
      'éééééé',
      'ééééééé',
      'x'.repeat(40),
      '日本語の名前',
    ];
    // Rollout ids are kept as JS strings (the store reads them): the same bounds, and nulls.
    const rolloutIds = [null, 'ro-1', 'ro-exactly12', 'ro-thirteen-1', 'ro-ééééé', `ro-日本語の名前-${'y'.repeat(30)}`];
    const spans = Array.from({ length: 600 }, (_, i) =>
      span({
        name: names[i % names.length],
        rollout_id: rolloutIds[i % rolloutIds.length],
        start: i + 1,
        end: i + 2,
        trace: i + 1,
      }),
    );
    // Two requests in one group commit share a data chunk; one more in the next has chunks of its own.
    await Promise.all([
      store.writeSpans(spanRows(...spans.slice(0, 7)), 1),
      store.writeSpans(spanRows(...spans.slice(7, 300)), 1),
    ]);
    await store.writeSpans(spanRows(...spans.slice(300)), 1);
    const { rows } = await store.query('SELECT name, rollout_id FROM spans ORDER BY start_time', { guard: false });
    assert.deepEqual(
      rows.map((r) => r.name),
      spans.map((s) => s.name),
    );
    assert.deepEqual(
      rows.map((r) => r.rollout_id),
      spans.map((s) => s.rollout_id),
    );
    const byRollout = await store.query(
      "SELECT rollout_id, count(*) AS n FROM spans WHERE rollout_id LIKE 'ro-%' GROUP BY rollout_id ORDER BY rollout_id",
      { guard: false },
    );
    assert.deepEqual(
      byRollout.rows.map((r) => [r.rollout_id, Number(r.n)]),
      rolloutIds
        .slice(1)
        .sort()
        .map((id) => [id, 100]),
    );
    const groups = await store.query('SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY name', {
      guard: false,
    });
    assert.deepEqual(
      groups.rows.map((r) => [r.name, Number(r.n)]),
      [...names].sort().map((name) => [name, spans.filter((s) => s.name === name).length]),
    );
    for (const name of names) {
      const {
        rows: [hit],
      } = await store.query(`SELECT count(*) AS n FROM spans WHERE name = '${name}' AND name LIKE '${name}%'`, {
        guard: false,
      });
      assert.equal(Number(hit.n), spans.filter((s) => s.name === name).length, name);
    }
  } finally {
    await store.close();
    await removeDir(dir);
  }
});

test('spans are numbered in commit order, and a file from before commit_seq gets its rowids', async () => {
  const dir = await newTempDir();
  const path = join(dir, 'seq.duckdb');
  const batch = (n: number, size: number) =>
    spanRows(
      ...Array.from({ length: size }, (_, i) => span({ name: `b${n}-${i}`, start: i + 1, end: i + 2, trace: n + 1 })),
    );
  try {
    let store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
    // Concurrent writes (some staged while a group commits), sizes around the chunk size.
    await Promise.all([3, 2050, 1, 300, 2047].map((size, n) => store.writeSpans(batch(n, size), 1)));
    const numbered = async () =>
      (await store.query('SELECT rowid AS r, commit_seq AS s FROM main.spans ORDER BY rowid', { guard: false })).rows;
    const first = await numbered();
    assert.equal(first.length, 4401);
    assert.deepEqual(
      first.map((row) => row.s),
      first.map((row) => row.r),
    );
    await store.close();
    // A file written before the column existed (schema 6): the migration numbers its rows by rowid.
    const raw = await DuckDBInstance.create(path);
    const connection = await raw.connect();
    // Later migrations' columns go too (the rewards' feedback text, source and label, the calls'
    // parameters and extra parts): a schema-6 file had none.
    await connection.run(`ALTER TABLE spans DROP COLUMN commit_seq;
      ALTER TABLE logs DROP COLUMN commit_seq;
      ALTER TABLE derived_rewards DROP COLUMN feedback;
      ALTER TABLE derived_rewards DROP COLUMN source;
      ALTER TABLE derived_rewards DROP COLUMN label;
      ALTER TABLE derived_calls DROP COLUMN parameters;
      ALTER TABLE derived_calls DROP COLUMN extra_parts;
      UPDATE agl_meta SET value = '6' WHERE key = 'schema_version';`);
    connection.closeSync();
    raw.closeSync();
    store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
    await store.writeSpans(batch(9, 5), 1);
    const again = await numbered();
    assert.deepEqual(
      again.map((row) => row.s),
      Array.from({ length: 4406 }, (_, i) => i),
    );
    // The deriver's watermark is a commit_seq: every span is derived once.
    assert.equal(await store.deriveAll(), 4406);
    assert.equal(await store.deriveAll(), 0);
    await store.close();
  } finally {
    await removeDir(dir);
  }
});
