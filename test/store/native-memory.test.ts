import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { processMemoryProbe, watchNativeMemory } from '../../src/store/native-memory.js';
import { DuckDBStore } from '../../src/store/store.js';
import { tempDir, until } from '../support/helpers.js';

const MB = 2 ** 20;

test('the watch collects once RSS has grown by its step since the last collection, or the lowest since', async () => {
  let rss = 500 * MB;
  const collections: number[] = [];
  const stop = watchNativeMemory(
    {
      rss: () => rss,
      collect: () => {
        collections.push(rss);
        rss -= 40 * MB; // what the collection freed
      },
    },
    { everyMs: 5, stepBytes: 64 * MB },
  );
  try {
    const ticks = () => new Promise((resolve) => setTimeout(resolve, 30));
    rss += 63 * MB;
    await ticks();
    assert.deepEqual(collections, [], 'under the step: no collection');
    rss += 1 * MB;
    await until(async () => assert.deepEqual(collections, [564 * MB]), 5_000);
    // RSS after it (524 MB) is the new mark: 60 MB more is under the step.
    rss += 60 * MB;
    await ticks();
    assert.equal(collections.length, 1);
    // A query's memory freed (down to 450 MB) lowers the mark: growth counts from there.
    rss = 450 * MB;
    await ticks();
    rss = 514 * MB;
    await until(async () => assert.deepEqual(collections, [564 * MB, 514 * MB]), 5_000);
  } finally {
    stop();
  }
});

test("the process's collection frees DuckDB's results that nothing references", async (t) => {
  const instance = await DuckDBInstance.create(join(await tempDir(t), 'results.duckdb'));
  const connection = await instance.connect();
  try {
    const freed: string[] = [];
    const registry = new FinalizationRegistry((name: string) => freed.push(name));
    await (async () => {
      // In a scope of its own, so that nothing on this stack keeps the result.
      registry.register(await connection.runAndReadAll('SELECT range AS n FROM range(100000)'), 'result');
    })();
    // One collection, and nothing else allocating: without it the idle process would keep the result.
    processMemoryProbe().collect();
    await until(async () => assert.deepEqual(freed, ['result']), 5_000);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
});

test("a store's file runs DuckDB's allocator with its background thread", async (t) => {
  const store = await DuckDBStore.open({ path: join(await tempDir(t), 'allocator.duckdb') });
  try {
    const [row] = (await store.query("SELECT current_setting('allocator_background_threads') AS on", { guard: false }))
      .rows;
    assert.equal(row.on, true);
  } finally {
    await store.close();
  }
});
