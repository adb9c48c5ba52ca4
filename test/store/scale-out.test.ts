import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import type { AttemptedRollout, RolloutConfigRequest } from '../../src/api/types.js';
import { StoreClient } from '../../src/client/store-client.js';
import { StoreUnreachableError } from '../../src/client/store-request.js';
import { post, runCli, spawnServe, tempDir } from '../support/helpers.js';
import { startPostgres } from '../support/postgres.js';
import { otlpJsonRequest } from '../support/span-fixtures.js';
import { startProxy } from '../support/proxy.js';

// A fleet: two `agl serve` processes on one PostgreSQL database behind nginx, the way
// docs/scale-out.md deploys them. One is killed (SIGKILL) in the middle of a run.

/** One OTLP/JSON request of two spans of a rollout's attempt; answers the body and the span keys. */
function spansOf(rollout: AttemptedRollout): { body: string; keys: string[] } {
  const traceId = randomBytes(16).toString('hex');
  const now = BigInt(Date.now()) * 1_000_000n;
  const spans = ['llm', 'tool'].map((name, i) => ({
    traceId,
    spanId: randomBytes(8).toString('hex'),
    name,
    start: now + BigInt(i),
    end: now + 1000n,
  }));
  return { body: otlpJsonRequest(spans, rollout), keys: spans.map((s) => `${traceId}/${s.spanId}`) };
}

/** Sends spans until a server acknowledges them (an exporter retries a 502 or 503); records them as acknowledged. */
async function export_(url: string, rollout: AttemptedRollout, acknowledged: Set<string>): Promise<void> {
  const { body, keys } = spansOf(rollout);
  for (;;) {
    const answer = await post(`${url}/v1/traces`, body, { 'content-type': 'application/json' }).catch(() => null);
    if (answer?.status === 200) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  for (const key of keys) acknowledged.add(key);
}

/** Calls `call` again while the load balancer answers that no server took it (502: the server died mid-request). */
async function retried<T>(call: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof StoreUnreachableError)) throw error;
    }
  }
}

test('two servers behind nginx: a server killed mid-run loses no acknowledged span, and the other retries its attempts', async (t) => {
  const cluster = await startPostgres();
  t.after(() => cluster.stop());
  const state = await cluster.createDatabase();
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  // Each server moves its spans to the shared directory every 200 ms.
  const argsOf = (id: string) => [
    '--quiet',
    '--db',
    join(dir, `${id}.duckdb`),
    '--state',
    state,
    '--spans-dir',
    spansDir,
    '--server-id',
    id,
    '--spans-move-every',
    '0.2',
  ];
  const [a, b] = [await spawnServe(argsOf('a')), await spawnServe(argsOf('b'))];
  t.after(async () => {
    for (const server of [a, b]) if (server.child.exitCode === null) server.child.kill('SIGKILL');
  });
  const proxy = await startProxy([a.url, b.url]);
  t.after(() => proxy.stop());
  for (const server of [a, b])
    assert.deepEqual(await (await fetch(`${server.url}/v1/agl/health`)).json(), {
      status: 'ok',
      backend: 'postgres',
      spanMove: { serverId: server === a ? 'a' : 'b', rows: 0, seconds: 0 },
    });

  const algorithm = new StoreClient(proxy.url);
  const config: RolloutConfigRequest = { unresponsive_seconds: 3, max_attempts: 2, retry_condition: ['unresponsive'] };
  const ids = (await algorithm.enqueueManyRollouts(Array.from({ length: 30 }, (_, i) => ({ input: i, config })))).map(
    (r) => r.rollout_id,
  );
  const acknowledged = new Set<string>();

  // Runners of server a take three rollouts and send a span each; they go down with it.
  const onA = new StoreClient(a.url);
  const doomed: AttemptedRollout[] = [];
  for (let i = 0; i < 3; i++) {
    const rollout = await onA.dequeueRollout({ workerId: `doomed-${i}` });
    assert.ok(rollout);
    await export_(a.url, rollout, acknowledged);
    doomed.push(rollout);
  }

  // Six runners through the load balancer; server a is killed once they have finished five rollouts.
  const completed: string[] = [];
  let killed: Promise<unknown> | undefined;
  let done = false;
  const runner = async (index: number) => {
    const client = new StoreClient(proxy.url);
    while (!done) {
      const rollout = await retried(() => client.dequeueRollout({ workerId: `runner-${index}`, waitSeconds: 0.5 }));
      if (!rollout) continue;
      for (let turn = 0; turn < 2; turn++) await export_(proxy.url, rollout, acknowledged);
      await retried(() =>
        client.updateAttempt(rollout.rollout_id, rollout.attempt.attempt_id, { status: 'succeeded' }),
      );
      completed.push(`${rollout.rollout_id}/${rollout.attempt.attempt_id}`);
      if (completed.length === 5) {
        a.child.kill('SIGKILL');
        killed = a.exited;
      }
    }
  };
  const runners = Array.from({ length: 6 }, (_, i) => runner(i));

  const finished = await retried(() => algorithm.waitForRollouts(ids, 60));
  done = true;
  await Promise.all(runners);
  await killed;
  assert.equal(a.child.signalCode, 'SIGKILL', 'server a was killed mid-run');

  assert.deepEqual(
    finished.map((r) => r.status),
    ids.map(() => 'succeeded'),
  );
  assert.equal(new Set(completed).size, completed.length, 'no attempt was run by two runners');
  assert.equal(new Set(completed.map((c) => c.split('/')[0])).size, ids.length, 'every rollout was run to the end');
  for (const rollout of doomed) {
    const attempts = (await algorithm.queryAttempts(rollout.rollout_id)).items;
    assert.deepEqual(
      attempts.map((at) => [at.sequence_id, at.status]),
      [
        [1, 'unresponsive'],
        [2, 'succeeded'],
      ],
      "server a's attempt timed out and the rollout was run again through server b",
    );
  }

  // Every span a server acknowledged reaches the span directory: server b's as it stops, and
  // those server a held when it was killed once it is back on its file and stops. Read from the
  // directory, each server's spans are there once, and spans numbered by both servers took
  // distinct sequence ids of their rollout.
  b.child.kill('SIGTERM');
  assert.equal(await b.exited, 0);
  const again = await spawnServe(argsOf('a'));
  again.child.kill('SIGTERM');
  const code = await again.exited;
  assert.equal(code, 0, `${again.child.signalCode}: ${again.output()}`);
  const read = await runCli([
    'query',
    'SELECT trace_id, span_id, rollout_id, sequence_id, server FROM spans',
    '--spans-dir',
    spansDir,
    '--format',
    'json',
  ]);
  assert.equal(read.code, 0, read.stderr);
  const stored = JSON.parse(read.stdout) as Record<string, string>[];
  const perServer = stored.map((s) => `${s.server}/${s.trace_id}/${s.span_id}`);
  assert.equal(new Set(perServer).size, perServer.length, 'a span moved twice');
  const keys = new Set(stored.map((s) => `${s.trace_id}/${s.span_id}`));
  assert.deepEqual(
    [...acknowledged].filter((key) => !keys.has(key)),
    [],
    'acknowledged spans that no file holds',
  );
  const sequences = stored.map((s) => `${s.rollout_id}/${s.sequence_id}`);
  assert.equal(new Set(sequences).size, sequences.length, 'no sequence id was given twice');
});
