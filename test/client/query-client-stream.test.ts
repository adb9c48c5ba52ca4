import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { QueryClient } from '../../src/client/query-client.js';
import { startAgl, tempDir } from '../support/helpers.js';

test('a reader that stops after the first batch of a long stream: no stray error, the next query answers', async (t) => {
  const dir = await tempDir(t);
  const agl = await startAgl(`${dir}/agl.duckdb`);
  t.after(() => agl.close());
  const client = new QueryClient(agl.url);
  // An 'error' event that nobody handles ends the process; here it is caught and counted.
  const stray: Error[] = [];
  const onError = (error: Error) => stray.push(error);
  process.on('uncaughtException', onError);
  t.after(() => process.off('uncaughtException', onError));
  for await (const batch of client.stream("SELECT range AS n, repeat('x', 100) AS t FROM range(200000)")) {
    assert.equal(batch.length, 2048);
    break;
  }
  // The aborted body's events come on later turns of the loop (an absence: no event to wait for).
  await nextTurn();
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.deepEqual(stray, []);
  assert.deepEqual((await client.query('SELECT 42 AS n')).rows, [{ n: 42 }]);
});
