import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, test, type TestContext } from 'node:test';
import { StoreClient } from '../../src/client/store-client.js';
import { Runner, StoreDowntimeError } from '../../src/runner/runner.js';
import { loadAgent } from '../../src/runner/load-agent.js';
import type { Rollout } from '../../src/api/types.js';
import { CLI, newTempDir, removeDir, spawnServe, until } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';

// Runners under faults: a hanging agent, a runner killed mid-rollout, the server killed and
// restarted while runners work, several runner processes (--workers), a store that answers
// errors (a 500 fails the rollout at once; a 503 is waited for).

let dir: string;
const runners = new Set<ChildProcess>();
/** Servers a failed test left running (the others stop theirs). */
const servers = new Set<ChildProcess>();
before(async () => {
  dir = await newTempDir();
});
after(async () => {
  for (const child of [...runners, ...servers]) child.kill('SIGKILL');
  await removeDir(dir);
});

const SLEEPY = join(APPS, 'sleepy-agent.mjs');

function startRunner(url: string, args: string[] = [], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [CLI, 'runner', SLEEPY, '--store', url, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  runners.add(child);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      runners.delete(child);
      resolve(code);
    }),
  );
  return { child, exited, output: () => output };
}

/** An `agl serve` of its own file (killed after the tests if a test left it), and a client of it. */
async function serve(name: string) {
  const server = await spawnServe(['--db', join(dir, `${name}.duckdb`), '--quiet']);
  servers.add(server.child);
  return { server, store: new StoreClient(server.url) };
}

async function finished(store: StoreClient, rollouts: Rollout[], seconds: number): Promise<Rollout[]> {
  return store.waitForRollouts(
    rollouts.map((r) => r.rollout_id),
    seconds,
  );
}

test('a hanging agent: its attempt times out, the slot goes on; a throwing agent fails with its error', async () => {
  const { server, store } = await serve('hang');
  const config = { timeout_seconds: 1, max_attempts: 1 };
  const queued = await store.enqueueManyRollouts([
    { input: { hang: true }, config },
    { input: { fail: 'this' } },
    { input: { ms: 10 } },
  ]);
  const runner = new Runner({ store, agent: await loadAgent(SLEEPY), concurrency: 1, maxRollouts: 3 });
  // The agent of the first never returns: that run() returns at all is the slot going on.
  assert.deepEqual(await runner.run(), { rollouts: 3 });
  const attempts = await Promise.all(queued.map((r) => store.getLatestAttempt(r.rollout_id)));
  assert.deepEqual(
    attempts.map((a) => a?.status),
    ['timeout', 'failed', 'succeeded'],
  );
  assert.match(String(attempts[0]?.metadata?.error), /ran past its timeout of 1 s/);
  assert.deepEqual(attempts[1]?.metadata, { error: 'cannot do this' });
  server.child.kill('SIGTERM');
  await server.exited;
});

test('a runner killed mid-rollout: the attempt becomes unresponsive and the rollout runs again elsewhere, never twice at once', async () => {
  const { server, store } = await serve('kill');
  const [rollout] = await store.enqueueManyRollouts([
    { input: {}, config: { unresponsive_seconds: 1, max_attempts: 2, retry_condition: ['unresponsive'] } },
  ]);
  const doomed = startRunner(server.url, [], { AGENT_SLEEP_MS: '60000' });
  await until(async () => assert.equal((await store.getLatestAttempt(rollout.rollout_id))?.status, 'running'), 15_000);
  doomed.child.kill('SIGKILL');
  await doomed.exited;
  await until(async () => assert.equal((await store.getRolloutById(rollout.rollout_id))?.status, 'requeuing'), 15_000);
  const healthy = startRunner(server.url, ['--max-rollouts', '1']);
  assert.equal(await healthy.exited, 0, healthy.output());
  const [done] = await finished(store, [rollout], 10);
  assert.equal(done.status, 'succeeded');
  const attempts = (await store.queryAttempts(rollout.rollout_id)).items;
  assert.deepEqual(
    attempts.map((a) => a.status),
    ['unresponsive', 'succeeded'],
  );
  assert.ok(attempts[1].start_time >= attempts[0].start_time);
  server.child.kill('SIGTERM');
  await server.exited;
});

test('the server killed and restarted while runners work: they reconnect and every rollout finishes', async () => {
  const db = join(dir, 'restart.duckdb');
  let server = await spawnServe(['--db', db, '--quiet']);
  servers.add(server.child);
  const port = new URL(server.url).port;
  const store = new StoreClient(server.url, { retryDelaysSeconds: [0.5, 1, 2, 5] });
  // A dequeue answered by a server killed before the answer went out leaves an attempt no runner
  // has: unresponsive_seconds lets the store retry it.
  const config = { unresponsive_seconds: 3, max_attempts: 3, retry_condition: ['unresponsive' as const] };
  const queued = await store.enqueueManyRollouts(Array.from({ length: 24 }, () => ({ input: { ms: 250 }, config })));
  const runner = startRunner(server.url, ['--concurrency', '2']);
  await until(
    async () => assert.ok((await store.queryRollouts({ status_in: ['succeeded'] })).items.length >= 3),
    20_000,
  );
  server.child.kill('SIGKILL');
  await server.exited;
  // Back once the runner has seen it gone (a dequeue refused: the client does not retry those).
  await until(async () => assert.match(runner.output(), /the store is away/), 20_000);
  server = await spawnServe(['--db', db, '--port', port, '--quiet']);
  servers.add(server.child);
  const done = await finished(store, queued, 60);
  assert.equal(done.length, 24);
  assert.ok(
    done.every((r) => r.status === 'succeeded'),
    JSON.stringify(done.map((r) => r.status)),
  );
  assert.equal(runner.child.exitCode, null, 'the runner lives on');
  runner.child.kill('SIGINT');
  assert.equal(await runner.exited, 0, runner.output());
  // One line when the store went, one when it came back with the retries between: not one per retry.
  const away = runner.output().match(/the store is away/g) ?? [];
  const back = [...runner.output().matchAll(/the store answers again after \d+\.\d s and (\d+) retr(y|ies)/g)];
  assert.equal(away.length, 1, runner.output());
  assert.equal(back.length, 1, runner.output());
  assert.ok(Number(back[0][1]) >= 1, runner.output());
  server.child.kill('SIGTERM');
  await server.exited;
});

test('--max-store-downtime: a runner whose store stays away ends with an error naming it, exit 1', async () => {
  const closed = await new Promise<number>((resolve) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const url = `http://127.0.0.1:${closed}`;
  const runner = startRunner(url, ['--max-store-downtime', '2s']);
  assert.equal(await runner.exited, 1, runner.output());
  assert.match(
    runner.output(),
    new RegExp(
      `agl: runner \\S+: the store at ${url} has been away for \\d+\\.\\d s \\(\\d+ retr(y|ies)\\), past --max-store-downtime 2s; the last failure: .*ECONNREFUSED`,
    ),
  );
  assert.equal(runner.output().match(/the store is away/g)?.length, 1, runner.output());
});

test('--workers 2: two runner processes share the queue; Ctrl-C stops both', async () => {
  const { server, store } = await serve('workers');
  const queued = await store.enqueueManyRollouts(Array.from({ length: 8 }, () => ({ input: { ms: 200 } })));
  const runner = startRunner(server.url, ['--workers', '2', '--worker-id', 'pair']);
  const done = await finished(store, queued, 60);
  assert.ok(done.every((r) => r.status === 'succeeded'));
  const workers = new Set<string>();
  for (const r of queued) workers.add(String((await store.getLatestAttempt(r.rollout_id))?.worker_id));
  assert.deepEqual([...workers].sort(), ['pair-1', 'pair-2']);
  runner.child.kill('SIGINT');
  assert.equal(await runner.exited, 0, runner.output());
  server.child.kill('SIGTERM');
  await server.exited;
});

/**
 * A proxy in front of `upstream` that answers `fault`'s status (with a JSON detail) instead of
 * passing a request on, for the requests `fault` picks.
 */
async function faultyProxy(
  t: TestContext,
  upstream: string,
  fault: (path: string, body: string) => number | undefined,
): Promise<string> {
  const proxy = createServer(
    (request, response) => void relay(request, response).catch((error: Error) => response.destroy(error)),
  );
  async function relay(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const status = fault(request.url ?? '', body.toString());
    if (status !== undefined) {
      response
        .writeHead(status, { 'content-type': 'application/json', 'retry-after': '0' })
        .end(JSON.stringify({ detail: `injected ${status}` }));
      return;
    }
    const headers: Record<string, string> = {};
    for (const name of ['content-type', 'content-encoding', 'authorization'])
      if (request.headers[name]) headers[name] = request.headers[name] as string;
    const answer = await fetch(`${upstream}${request.url}`, {
      method: request.method,
      headers,
      body: chunks.length ? body : undefined,
    });
    response
      .writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' })
      .end(Buffer.from(await answer.arrayBuffer()));
  }
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    proxy.close();
    proxy.closeAllConnections();
  });
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
}

const ATTEMPT_UPDATE = /^\/v1\/agl\/rollouts\/[^/]+\/attempts\/[^/]+$/;

test('a store answering 500 while the runner marks an attempt running: the rollout fails at once with that error', async (t) => {
  const { server, store } = await serve('answer-500');
  const proxy = await faultyProxy(t, server.url, (path, body) =>
    ATTEMPT_UPDATE.test(path) && body.includes('"running"') ? 500 : undefined,
  );
  const [rollout] = await store.enqueueManyRollouts([{ input: { ms: 10 }, config: { unresponsive_seconds: 60 } }]);
  const runner = startRunner(proxy, ['--max-rollouts', '1']);
  assert.equal(await runner.exited, 0, runner.output());
  const attempt = await store.getLatestAttempt(rollout.rollout_id);
  assert.equal(attempt?.status, 'failed');
  assert.match(String(attempt?.metadata?.error), /answered 500 .*injected 500/);
  assert.match(runner.output(), /rollout \S+ failed before its agent ran: .*answered 500/);
  assert.doesNotMatch(runner.output(), /the store is away|sleepy-agent:/, 'neither retried nor run');
  const spans = (await store.querySpans({ rollout_id: rollout.rollout_id })).items;
  const exception = spans.find((span) => span.name === 'agentlightning.exception');
  assert.match(String(exception?.attributes['exception.message']), /answered 500/);
  server.child.kill('SIGTERM');
  await server.exited;
});

test("a store answering 500 to an attempt's outcome: said on stderr at once, not retried as a store away", async (t) => {
  const { server, store } = await serve('outcome-500');
  const proxy = await faultyProxy(t, server.url, (path, body) =>
    ATTEMPT_UPDATE.test(path) && body.includes('"succeeded"') ? 500 : undefined,
  );
  // On the old runner this retried for unresponsive_seconds.
  await store.enqueueManyRollouts([{ input: { ms: 10 }, config: { unresponsive_seconds: 120 } }]);
  const runner = startRunner(proxy, ['--max-rollouts', '1']);
  assert.equal(await runner.exited, 0, runner.output());
  assert.match(runner.output(), /could not report attempt \S+ of \S+: agl store answered 500/);
  assert.doesNotMatch(runner.output(), /the store is away/);
  server.child.kill('SIGTERM');
  await server.exited;
});

test('a store answering 503 to dequeues is waited for: the rollout runs once it answers again', async (t) => {
  const { server, store } = await serve('dequeue-503');
  let refused = 0;
  // The client does not retry a dequeue (it could hand out a rollout twice): the runner does.
  const proxy = await faultyProxy(t, server.url, (path) =>
    path.endsWith('/dequeue') && refused++ < 3 ? 503 : undefined,
  );
  const [rollout] = await store.enqueueManyRollouts([{ input: { ms: 10 } }]);
  const runner = startRunner(proxy, ['--max-rollouts', '1']);
  assert.equal(await runner.exited, 0, runner.output());
  assert.equal((await store.getRolloutById(rollout.rollout_id))?.status, 'succeeded');
  assert.match(runner.output(), /the store is away \(agl store answered 503[\s\S]*the store answers again/);
  server.child.kill('SIGTERM');
  await server.exited;
});

test("Runner's maxStoreDowntimeSeconds (the Trainer's too): a run whose store stays away rejects with StoreDowntimeError", async () => {
  const closed = await new Promise<number>((resolve) => {
    const probe = createServer();
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const runner = new Runner({
    store: new StoreClient(`http://127.0.0.1:${closed}`),
    agent: await loadAgent(SLEEPY),
    maxStoreDowntimeSeconds: 1,
  });
  await assert.rejects(runner.run(), (error: unknown) => {
    assert.ok(error instanceof StoreDowntimeError, String(error));
    assert.ok(error.retries >= 1 && error.seconds >= 1, error.message);
    assert.match(error.lastFailure, /ECONNREFUSED/);
    return true;
  });
});
