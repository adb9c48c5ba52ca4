import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';

/**
 * The modules a fresh thread loads when it imports `entry`: every URL that module resolution
 * hands out, recorded by a resolve hook in that thread.
 */
async function modulesLoadedBy(entry: URL): Promise<string[]> {
  const code = `
    const { registerHooks } = require('node:module');
    const { parentPort, workerData } = require('node:worker_threads');
    const loaded = [];
    registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); loaded.push(r.url); return r; } });
    import(workerData).then(() => parentPort.postMessage(loaded), (e) => parentPort.postMessage({ error: String(e) }));`;
  const worker = new Worker(code, { eval: true, workerData: entry.href });
  try {
    const [loaded] = await new Promise<unknown[]>((resolve, reject) => {
      worker.once('message', (m) => resolve([m]));
      worker.once('error', reject);
    });
    assert.ok(Array.isArray(loaded), `importing ${entry.pathname} failed: ${JSON.stringify(loaded)}`);
    return loaded as string[];
  } finally {
    await worker.terminate();
  }
}

const native = (urls: string[]) => urls.filter((u) => /@duckdb|\.node$/.test(u));

test('a decode worker thread loads the codecs and nothing of the store or DuckDB', async () => {
  const loaded = await modulesLoadedBy(new URL('../src/collector/decode-worker.js', import.meta.url));
  assert.ok(
    loaded.some((u) => u.endsWith('/otlp/protobuf-decoder.js')),
    'the protobuf decoder is loaded',
  );
  assert.deepEqual(native(loaded), []);
  assert.deepEqual(
    loaded.filter((u) => /\/src\/(store|collector\/(?!decode-worker))/.test(u)),
    [],
  );
});

test('the light `agl` entry and `agl/client` load no DuckDB', async () => {
  for (const entry of ['../src/index.js', '../src/client.js']) {
    const loaded = await modulesLoadedBy(new URL(entry, import.meta.url));
    assert.deepEqual(native(loaded), [], entry);
    assert.deepEqual(
      loaded.filter((u) => u.includes('/src/store/')),
      [],
      entry,
    );
  }
});

test('the SQL builders load only src/api and src/sql: the dashboard bundles them', async () => {
  for (const entry of ['literals', 'derived', 'views', 'credited-calls']) {
    const loaded = await modulesLoadedBy(new URL(`../src/sql/${entry}.js`, import.meta.url));
    assert.deepEqual(
      loaded.filter((u) => !/\/src\/(api|sql)\//.test(u)),
      [],
      entry,
    );
  }
});

test('`agl/algorithms` loads no DuckDB, no store, no server and no OpenTelemetry SDK', async () => {
  const loaded = await modulesLoadedBy(new URL('../src/algorithms.js', import.meta.url));
  assert.deepEqual(native(loaded), []);
  assert.deepEqual(
    loaded.filter((u) => u.includes('/src/store/') || u.includes('/src/collector/')),
    [],
  );
  assert.deepEqual(
    loaded.filter((u) => u.includes('/@opentelemetry/sdk-node/')),
    [],
  );
});
