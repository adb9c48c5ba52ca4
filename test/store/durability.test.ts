import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { StoreClient } from '../../src/client/store-client.js';
import { post, restartAfterKill, runCli, spawnServe, startAgl, tempDir, until } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

test('acknowledged spans survive SIGKILL of the server right after the 200', async (t) => {
  const db = join(await tempDir(t), 'durable.duckdb');
  const template = await makeBatch(300, { rolloutId: 'ro-durable' });

  const first = await spawnServe(['--db', db]);
  t.after(() => first.child.kill('SIGKILL'));
  const responses = await Promise.all(
    [1, 2, 3, 4].map((i) =>
      post(`${first.url}/v1/traces`, freshCopy(template, i), { 'content-type': 'application/x-protobuf' }),
    ),
  );
  assert.deepEqual(
    responses.map((r) => r.status),
    [200, 200, 200, 200],
  );
  const { again: second, stored } = await restartAfterKill(t, first, db);
  assert.deepEqual(stored, { n: 1200, last: 1200 });

  // While the server owns the file, `agl query --db` goes through it.
  const viaServer = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db, '--format', 'csv']);
  assert.equal(viaServer.code, 0, viaServer.stderr);
  assert.equal(viaServer.stdout, 'n\r\n1200\r\n');

  // After the restart, a re-delivery is still recognised and the rollout's counter goes on.
  const redelivered = await post(`${second.url}/v1/traces`, freshCopy(template, 2), {
    'content-type': 'application/x-protobuf',
  });
  assert.equal(redelivered.status, 200);
  const fresh = await post(`${second.url}/v1/traces`, freshCopy(template, 5), {
    'content-type': 'application/x-protobuf',
  });
  assert.equal(fresh.status, 200);
  const after = await runCli([
    'query',
    'SELECT count(*) AS n, count(DISTINCT sequence_id) AS ids, max(sequence_id) AS last FROM spans',
    '--db',
    db,
    '--format',
    'json',
  ]);
  assert.equal(after.code, 0, after.stderr);
  assert.deepEqual(JSON.parse(after.stdout), [{ n: 1500, ids: 1500, last: 1500 }]);
});

test('SIGTERM flushes, checkpoints and removes the server announcement', async (t) => {
  const db = join(await tempDir(t), 'graceful.duckdb');
  const serve = await spawnServe(['--db', db]);
  t.after(() => serve.child.kill('SIGKILL'));
  assert.ok(existsSync(`${db}.agl-server.json`), 'the server announces itself for agl query');
  const template = await makeBatch(50);
  assert.equal(
    (await post(`${serve.url}/v1/traces`, template.body, { 'content-type': 'application/x-protobuf' })).status,
    200,
  );
  serve.child.kill('SIGTERM');
  assert.equal(await serve.exited, 0);
  assert.ok(!existsSync(`${db}.agl-server.json`));
  assert.ok(!existsSync(`${db}.wal`), 'the WAL was checkpointed into the file');
  const count = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db, '--format', 'csv']);
  assert.equal(count.stdout, 'n\r\n50\r\n');
});

test('the store survives SIGKILL: queued rollouts stay queued, running attempts resolve by the watchdog', async (t) => {
  const db = join(await tempDir(t), 'store-kill.duckdb');
  const first = await spawnServe(['--db', db]);
  t.after(() => first.child.kill('SIGKILL'));
  const client = new StoreClient(first.url);
  const resources = await client.addResources({
    prompt: { resource_type: 'prompt_template', template: '{q}', engine: 'f-string' },
  });
  const [running, queued] = await client.enqueueManyRollouts([
    { input: 'running', config: { unresponsive_seconds: 0.2, max_attempts: 2, retry_condition: ['unresponsive'] } },
    { input: 'queued' },
  ]);
  const taken = await client.dequeueRollout({ workerId: 'w' });
  assert.equal(taken?.rollout_id, running.rollout_id);
  first.child.kill('SIGKILL');
  await first.exited;

  const second = await spawnServe(['--db', db]);
  t.after(() => second.child.kill('SIGKILL'));
  const again = new StoreClient(second.url);
  assert.deepEqual(await again.getLatestResources(), resources);
  // The attempt that was running when the server died goes silent: the watchdog requeues it.
  const [requeued] = await again.waitForRollouts([running.rollout_id], 0);
  assert.equal(requeued, undefined, 'not finished: it retries');
  await new Promise((resolve) => setTimeout(resolve, 300));
  const stale = (await again.getRolloutById(running.rollout_id)) as { status: string; attempt: { status: string } };
  assert.equal(stale.attempt.status, 'unresponsive');
  assert.equal(stale.status, 'requeuing');
  const next = await again.dequeueManyRollouts({ limit: 2 });
  assert.deepEqual(
    next.map((r) => [r.rollout_id, r.attempt.sequence_id]),
    [
      [queued.rollout_id, 1],
      [running.rollout_id, 2],
    ],
  );
});

test('an idle store checkpoints a large WAL into the file, then derives the new spans, by itself', async (t) => {
  const db = join(await tempDir(t), 'idle.duckdb');
  const agl = await startAgl(db, { deriveWhenIdleMs: 100 });
  t.after(() => agl.close());
  const template = await makeBatch(512, { promptBytes: 4096 });
  for (let i = 1; i <= 8; i++) {
    assert.equal(
      (await post(`${agl.url}/v1/traces`, freshCopy(template, i), { 'content-type': 'application/x-protobuf' })).status,
      200,
    );
  }
  // 8 x 512 spans with 4 KB prompts: over the 16 MB at which an idle store checkpoints.
  await until(
    async () =>
      assert.ok(!existsSync(`${db}.wal`) || statSync(`${db}.wal`).size < 2 ** 20, 'the WAL was folded into the file'),
    20_000,
  );
  const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
  assert.equal(Number(rows[0].n), 4096);
  await until(async () => {
    const { rows: derived } = await agl.store.query('SELECT count(*) AS n FROM derived_calls', { guard: false });
    assert.equal(Number(derived[0].n), 4096, 'every LLM span derived into derived_calls');
  }, 30_000);
});
