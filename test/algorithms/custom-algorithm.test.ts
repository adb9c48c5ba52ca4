import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { spawnServe, tempDir } from '../support/helpers.js';
import { EXAMPLES, REGISTER } from '../support/instrumented-app.js';

// The "first custom algorithm" walk-through, as its README runs it: store, runner and algorithm
// as three processes.

test('examples/custom-algorithm: three templates tried, the number-only one found best', async (t) => {
  const dir = await tempDir(t);
  const serve = await spawnServe(['--db', join(dir, 'walkthrough.duckdb')]);
  const env = { ...process.env };
  delete env.OPENAI_API_KEY;
  const main = join(EXAMPLES, 'custom-algorithm', 'main.mjs');
  const runner = spawn(process.execPath, ['--import', REGISTER, main, 'runner', '--store', serve.url], {
    env: { ...env, AGL_ENDPOINT: serve.url },
    stdio: 'ignore',
  });
  const runnerExited = new Promise((resolve) => runner.once('exit', resolve));
  t.after(async () => {
    runner.kill('SIGTERM');
    await runnerExited;
    serve.child.kill('SIGTERM');
    await serve.exited;
  });
  const output = await new Promise<string>((resolve, reject) =>
    execFile(
      process.execPath,
      [main, 'algo', '--store', serve.url],
      { env, timeout: 120_000 },
      (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
    ),
  );
  assert.match(output, /offline EXAMPLE model server/);
  assert.match(output, /0 {2}"\{question\}"/);
  assert.match(output, /1 {2}"Answer with the number only\. \{question\}"/);
  assert.match(output, /best template: "Answer with the number only\. \{question\}" \(reward 1\)/);
});
