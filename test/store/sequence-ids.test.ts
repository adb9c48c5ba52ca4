import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { OtlpDecoder } from '../../src/otlp/decode.js';
import { SequenceIds } from '../../src/store/sequence-ids.js';
import { DuckDBStore } from '../../src/store/store.js';
import { queryRows, tempDir } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

// Span sequence ids number each rollout's spans from 1 without a gap or a repeat, across
// counters the store let go of and across a reopen, which keeps no counter at all.

test('a counter unused for two generations is let go, and read back from the stored spans', async () => {
  let now = 0;
  const stored = new Map([['ro-old', 7]]);
  const asked: string[][] = [];
  const ids = new SequenceIds(
    async (rolloutIds) => {
      asked.push([...rolloutIds]);
      return new Map(rolloutIds.flatMap((id) => (stored.has(id) ? [[id, stored.get(id) as number]] : [])));
    },
    60_000,
    () => now,
  );
  ids.begin('ro-new'); // made by the store: nothing to read
  await ids.prepare(['ro-new', 'ro-old', 'ext-1']);
  assert.deepEqual(asked, [['ro-old', 'ext-1']]);
  assert.deepEqual([ids.next('ro-new'), ids.next('ro-old'), ids.next('ext-1'), ids.next('ext-1')], [1, 8, 1, 2]);
  assert.throws(() => ids.next('ro-unprepared'), /sequence counter of rollout ro-unprepared was not prepared/);

  now = 60_000; // a new generation: the counters so far are kept as the previous one
  await ids.prepare(['ro-new']);
  assert.equal(ids.next('ro-new'), 2, 'used again: brought into the current generation');
  stored.set('ext-1', 2); // what was numbered got stored meanwhile
  now = 120_000; // the previous generation is let go: ro-old and ext-1, unused for 60-120 s
  await ids.prepare(['ro-new', 'ext-1']);
  assert.deepEqual(asked.at(-1), ['ext-1']);
  assert.equal(ids.size, 2);
  assert.deepEqual([ids.next('ro-new'), ids.next('ext-1')], [3, 3]);
});

test('two writes that read the same counter keep the higher one', async () => {
  const answers: ((found: Map<string, number>) => void)[] = [];
  const ids = new SequenceIds(() => new Promise((resolve) => answers.push(resolve)));
  const first = ids.prepare(['ro-1']);
  const second = ids.prepare(['ro-1']);
  answers[0](new Map([['ro-1', 4]]));
  await first;
  assert.equal(ids.next('ro-1'), 5);
  answers[1](new Map([['ro-1', 4]])); // read before the first write's span was stored
  await second;
  assert.equal(ids.next('ro-1'), 6);
});

test("spans of a rollout go on from the stored ones after a reopen, OTLP's and the store's own", async (t) => {
  const path = join(await tempDir(t), 'sequence.duckdb');
  const decoder = new OtlpDecoder();
  const writeBatch = async (store: DuckDBStore, serial: number) => {
    const body = freshCopy(await makeBatch(3, { rolloutId: 'ext-1' }), serial);
    await store.writeSpans(decoder.decode('traces', 'protobuf', body).rows, body.length);
  };
  let store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
  const made = await store.lightning.startRollout({ input: { task: 1 } });
  await writeBatch(store, 1);
  assert.equal(await store.lightning.getNextSpanSequenceId(made.rollout_id, made.attempt.attempt_id), 1);
  assert.equal(await store.lightning.getNextSpanSequenceId(made.rollout_id, made.attempt.attempt_id), 2);
  await store.close();

  store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
  t.after(() => store.close());
  await writeBatch(store, 2);
  assert.deepEqual(
    await queryRows(
      store,
      "SELECT list(sequence_id ORDER BY sequence_id) AS ids FROM spans WHERE rollout_id = 'ext-1'",
    ),
    [{ ids: [1, 2, 3, 4, 5, 6] }],
  );
});
