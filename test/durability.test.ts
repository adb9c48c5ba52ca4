import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { post, runCli, spawnServe, tempDir } from './helpers.js';
import { freshCopy, makeBatch } from './otlp-batches.js';

test('acknowledged spans survive SIGKILL of the server right after the 200', async (t) => {
  const db = join(await tempDir(t), 'durable.duckdb');
  const template = await makeBatch(300, { rolloutId: 'ro-durable' });

  const first = await spawnServe(['--db', db]);
  t.after(() => first.child.kill('SIGKILL'));
  const responses = await Promise.all(
    [1, 2, 3, 4].map((i) => post(`${first.url}/v1/traces`, freshCopy(template, i), { 'content-type': 'application/x-protobuf' })),
  );
  assert.deepEqual(responses.map((r) => r.status), [200, 200, 200, 200]);
  first.child.kill('SIGKILL');
  await first.exited;

  const second = await spawnServe(['--db', db]);
  t.after(async () => {
    second.child.kill('SIGTERM');
    await second.exited;
  });
  const count = await runCli(['query', 'SELECT count(*) AS n, max(sequence_id) AS last FROM spans', '--url', second.url, '--format', 'json']);
  assert.equal(count.code, 0, count.stderr);
  assert.deepEqual(JSON.parse(count.stdout), [{ n: 1200, last: 1200 }]);

  // While the server owns the file, `agl query --db` goes through it.
  const viaServer = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db, '--format', 'csv']);
  assert.equal(viaServer.code, 0, viaServer.stderr);
  assert.equal(viaServer.stdout, 'n\r\n1200\r\n');

  // After the restart, a re-delivery is still recognised and the rollout's counter goes on.
  const redelivered = await post(`${second.url}/v1/traces`, freshCopy(template, 2), { 'content-type': 'application/x-protobuf' });
  assert.equal(redelivered.status, 200);
  const fresh = await post(`${second.url}/v1/traces`, freshCopy(template, 5), { 'content-type': 'application/x-protobuf' });
  assert.equal(fresh.status, 200);
  const after = await runCli(['query', 'SELECT count(*) AS n, count(DISTINCT sequence_id) AS ids, max(sequence_id) AS last FROM spans', '--db', db, '--format', 'json']);
  assert.equal(after.code, 0, after.stderr);
  assert.deepEqual(JSON.parse(after.stdout), [{ n: 1500, ids: 1500, last: 1500 }]);
});

test('SIGTERM flushes, checkpoints and removes the server announcement', async (t) => {
  const db = join(await tempDir(t), 'graceful.duckdb');
  const serve = await spawnServe(['--db', db]);
  t.after(() => serve.child.kill('SIGKILL'));
  assert.ok(existsSync(`${db}.agl-server.json`), 'the server announces itself for agl query');
  const template = await makeBatch(50);
  assert.equal((await post(`${serve.url}/v1/traces`, template.body, { 'content-type': 'application/x-protobuf' })).status, 200);
  serve.child.kill('SIGTERM');
  assert.equal(await serve.exited, 0);
  assert.ok(!existsSync(`${db}.agl-server.json`));
  assert.ok(!existsSync(`${db}.wal`), 'the WAL was checkpointed into the file');
  const count = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db, '--format', 'csv']);
  assert.equal(count.stdout, 'n\r\n50\r\n');
});
