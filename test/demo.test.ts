import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBStore } from '../src/store/store.js';
import { runCli, tempDir } from './helpers.js';

test('agl demo runs the whole loop offline and reports it; the file holds what it says', async (t) => {
  const dir = await tempDir(t);
  const db = join(dir, 'demo.duckdb');
  const env = { ...process.env };
  delete env.OPENAI_API_KEY; // offline, whatever the machine has
  const result = await runCli(['demo', '--db', db], { env });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /bundled offline EXAMPLE model server/);
  assert.match(result.stdout, /rollouts\s+10 \(10 succeeded, 0 failed: 100% success\)/);
  assert.match(result.stdout, /mean reward\s+0\.80/);
  assert.match(result.stdout, /LLM calls\s+10, \d+ input and 10 output tokens/);
  assert.match(result.stdout, /export triplets --db/);

  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const { rows } = await store.query(`SELECT (SELECT count(*) FROM rollouts WHERE status = 'succeeded')::INTEGER AS rollouts, (SELECT sum(value) FROM rewards) AS rewards`, { guard: false });
    assert.deepEqual(rows[0], { rollouts: 10, rewards: 8 });
  } finally {
    await store.close();
  }
});
