import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBStore } from '../../src/store/store.js';
import { runCli, tempDir } from '../support/helpers.js';

test('agl demo runs the whole loop offline, APO improves the prompt, and the file holds what it says', async (t) => {
  const dir = await tempDir(t);
  const db = join(dir, 'demo.duckdb');
  const env = { ...process.env };
  delete env.OPENAI_API_KEY; // offline, whatever the machine has
  const result = await runCli(['demo', '--db', db], { env });
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /bundled offline EXAMPLE model server/);
  // The first prompt asks for nothing: the example model answers in sentences, whose first number is no answer.
  assert.match(result.stdout, /rollouts\s+10 \(10 succeeded, 0 failed: 100% success\)/);
  assert.match(result.stdout, /mean reward\s+0\.00/);
  assert.match(result.stdout, /LLM calls\s+10, \d+ input and 60 output tokens/);
  // APO: the critic finds the sentences, then the careless sums; the editor asks for the number only, then for care.
  assert.match(result.stdout, /baseline score\s+0\.00/);
  assert.match(result.stdout, /optimized score\s+1\.00/);
  assert.match(
    result.stdout,
    /improvement\s+optimized - first: \+1\.000 \[\+1\.000, \+1\.000\] over 10 validation tasks \(paired, 95% interval\), p = 0\.002\n\s+optimized is better/,
  );
  assert.match(
    result.stdout,
    /best prompt\s+"Work carefully and double-check your arithmetic\. Answer with the number only\. \{question\}"/,
  );
  assert.match(result.stdout, /prompt_versions/);
  assert.match(result.stderr, /apo: round 2\/2: leader v\d+ scores 1\.000/);

  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const { rows } = await store.query(
      `SELECT (SELECT count(*) FROM prompt_versions)::INTEGER AS versions,
        (SELECT max(val_score) FROM prompt_versions) AS best,
        (SELECT resources->'prompt'->>'template' FROM resources ORDER BY update_time DESC LIMIT 1) AS latest`,
      { guard: false },
    );
    assert.deepEqual(rows[0], {
      versions: 3,
      best: 1,
      latest: 'Work carefully and double-check your arithmetic. Answer with the number only. {question}',
    });
  } finally {
    await store.close();
  }
});
