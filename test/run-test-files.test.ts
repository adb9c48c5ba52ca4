import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

// The suite's own runner (npm test): a file that hangs is killed after its time and named, with
// the test it was in, and the run fails; the other files' results still count.
const RUNNER = fileURLToPath(new URL('./support/run-test-files.js', import.meta.url));
const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/test-files/${name}.js`, import.meta.url));

test('a test file that hangs is killed after its time, named with the test it was in', {
  timeout: 120_000,
}, async () => {
  const { code, stdout } = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(
      process.execPath,
      [RUNNER, '--file-timeout', '3', '--concurrency', '2', fixture('hangs'), fixture('passes')],
      (error, out) => resolve({ code: error ? Number(error.code) : 0, stdout: out }),
    ),
  );
  assert.equal(code, 1, stdout);
  assert.match(stdout, /✖ .*hangs\.js ran past 3 s and was killed, in "a suite that hangs" > "waits forever"/);
  assert.match(stdout, /✖ failed: .*hangs\.js \(killed after 3 s\)/);
  assert.doesNotMatch(stdout, /failed: .*passes\.js/);
  assert.match(stdout, /^ℹ files 2$/m);
  assert.match(stdout, /^ℹ pass 2$/m, 'the file that passed is counted');
});

test('a test file that leaves a process holding its output is not waited for', { timeout: 60_000 }, async () => {
  const started = performance.now();
  const { code, stdout } = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(process.execPath, [RUNNER, '--file-timeout', '30', fixture('leaves-a-process')], (error, out) =>
      resolve({ code: error ? Number(error.code) : 0, stdout: out }),
    ),
  );
  const left = Number(/left pid (\d+)/.exec(stdout)?.[1]);
  if (left > 0) process.kill(left, 'SIGKILL');
  assert.equal(code, 0, stdout);
  assert.match(stdout, /✖ .*leaves-a-process\.js left a process running that holds its output open; not waited for/);
  assert.ok(performance.now() - started < 25_000, `waited ${Math.round(performance.now() - started)} ms`);
});
