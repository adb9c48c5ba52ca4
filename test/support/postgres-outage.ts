import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AttemptedRollout, RolloutConfigRequest } from '../../src/api/types.js';
import { QueryClient } from '../../src/client/query-client.js';
import { StoreClient } from '../../src/client/store-client.js';
import { StoreUnreachableError } from '../../src/client/store-request.js';
import { CLI, post, spawnServe, until, type SpawnedServe } from './helpers.js';
import { APPS } from './instrumented-app.js';
import { startPostgres, type PostgresCluster } from './postgres.js';
import { otlpJsonRequest } from './span-fixtures.js';

// PostgreSQL going away under a fleet: two `agl serve --state` servers, an `agl runner` process
// on each cycling rollouts, and the database stopped (pg_ctl stop -m fast) and started again.
// What the servers, the runners and the state did is reported; test/store/postgres-outage.test.ts
// asserts it with an outage of a few seconds, `scripts/postgres-outage.sh` runs the long one.

/** A request made while PostgreSQL was down, as the server answered it. */
export interface AnswerDuringOutage {
  readonly status: number;
  readonly retryAfter: string | null;
  readonly detail: string;
}

export interface OutageReport {
  /** host:port of the database, as messages name it. */
  readonly database: string;
  readonly outageSeconds: number;
  /** The rollouts' unresponsive_seconds. */
  readonly unresponsiveSeconds: number;
  /** Rollouts enqueued before the outage (and the one of the LISTEN check after it). */
  readonly rollouts: number;
  /** Rollouts that had finished when PostgreSQL was stopped. */
  readonly finishedBefore: number;
  /** During the outage: an enqueue and a SQL query (both need the state), and each server's health. */
  readonly enqueue: AnswerDuringOutage;
  readonly query: AnswerDuringOutage;
  readonly health: { status: string; reason?: string }[];
  /** OTLP requests of spans of no rollout sent to each server during the outage: their statuses. */
  readonly spanStatuses: number[];
  /** Of those spans' trace ids, the ones each server's file holds afterwards. */
  readonly spansStored: { sent: number; found: number }[];
  /** From PostgreSQL's start until every rollout had finished. */
  readonly recoverySeconds: number;
  /** Per rollout, its attempts' statuses in order; and its own final status. */
  readonly attempts: Map<string, string[]>;
  readonly statuses: Map<string, string>;
  /** Each runner's outage lines (away / back) and its exit code. */
  readonly runnerLines: string[][];
  readonly runnerCodes: (number | null)[];
  /** After the outage, a dequeue long poll on server b was woken by an enqueue on server a. */
  readonly listenWoke: boolean;
  /** Both servers still running at the end; what they printed. */
  readonly serversAlive: boolean;
  readonly serverOutputs: string[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Calls `call` again while the store is away (the test's own calls, not the runners'). */
async function retried<T>(call: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof StoreUnreachableError)) throw error;
      await sleep(200);
    }
  }
}

/** `agl runner` on a store: the sleepy agent, two rollouts at once. */
function startRunner(url: string, after: (fn: () => void) => void) {
  const child = spawn(
    process.execPath,
    [CLI, 'runner', join(APPS, 'sleepy-agent.mjs'), '--store', url, '--concurrency', '2'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { child, exited, output: () => output };
}

async function answerOf(response: Promise<{ status: number; headers: Headers; body: Buffer }>) {
  const { status, headers, body } = await response;
  let detail = body.toString();
  try {
    detail = String((JSON.parse(detail) as { detail?: unknown }).detail ?? detail);
  } catch {}
  return { status, retryAfter: headers.get('retry-after'), detail };
}

/** Runs the scenario; `after` registers what to stop and remove at the end (a test's t.after). */
export async function postgresOutage(
  after: (fn: () => unknown) => void,
  {
    outageSeconds,
    rollouts = 40,
    unresponsiveSeconds = 5,
  }: { outageSeconds: number; rollouts?: number; unresponsiveSeconds?: number },
): Promise<OutageReport> {
  const cluster = await startPostgres();
  after(() => cluster.stop());
  const state = await cluster.createDatabase();
  const dir = await mkdtemp(join(tmpdir(), 'agl-pg-outage-'));
  after(() => rm(dir, { recursive: true, force: true }));
  const servers: SpawnedServe[] = [];
  for (const id of ['a', 'b'])
    servers.push(await spawnServe(['--quiet', '--db', join(dir, `${id}.duckdb`), '--state', state]));
  after(() => {
    for (const server of servers) if (server.child.exitCode === null) server.child.kill('SIGKILL');
  });
  try {
    return await scenario(cluster, servers, after, { outageSeconds, rollouts, unresponsiveSeconds });
  } catch (error) {
    // What the servers said is what explains a failure here (a crash, a 500).
    throw new Error(`${(error as Error).message}\n${servers.map((server) => server.output()).join('\n')}`, {
      cause: error,
    });
  }
}

async function scenario(
  cluster: PostgresCluster,
  servers: SpawnedServe[],
  after: (fn: () => unknown) => void,
  {
    outageSeconds,
    rollouts,
    unresponsiveSeconds,
  }: { outageSeconds: number; rollouts: number; unresponsiveSeconds: number },
): Promise<OutageReport> {
  const [a, b] = servers.map((server) => new StoreClient(server.url));

  // A dequeue answered just before the outage whose answer was lost leaves an attempt no runner
  // has: unresponsive_seconds lets the watchdog run it again.
  const config: RolloutConfigRequest = {
    unresponsive_seconds: unresponsiveSeconds,
    max_attempts: 3,
    retry_condition: ['unresponsive'],
  };
  const ids = (
    await a.enqueueManyRollouts(Array.from({ length: rollouts }, (_, i) => ({ input: { ms: 200, i }, config })))
  ).map((r) => r.rollout_id);
  const runners = servers.map((server) => startRunner(server.url, after));

  // The outage, once the runners are well into the work.
  await until(async () => {
    if ((await a.queryRollouts({ status_in: ['succeeded'] })).items.length < rollouts / 5) throw new Error('not yet');
  }, 60_000);
  const finishedBefore = (await a.queryRollouts({ status_in: ['succeeded'] })).items.length;
  const down = Date.now();
  await cluster.shutDown();

  const enqueue = await answerOf(
    post(`${servers[0].url}/v1/agl/queues/rollouts/enqueue`, JSON.stringify({ rollouts: [{ input: {} }] }), {
      'content-type': 'application/json',
    }),
  );
  const query = await answerOf(
    post(`${servers[1].url}/v1/agl/query`, JSON.stringify({ sql: 'SELECT count(*) FROM rollouts' }), {
      'content-type': 'application/json',
    }),
  );
  const health = await Promise.all(
    servers.map(async (server) => (await fetch(`${server.url}/v1/agl/health`)).json() as Promise<{ status: string }>),
  );
  const traces = servers.map(() => [randomBytes(16).toString('hex'), randomBytes(16).toString('hex')]);
  const spanStatuses: number[] = [];
  for (const [i, server] of servers.entries())
    for (const traceId of traces[i]) {
      const body = otlpJsonRequest([
        { traceId, spanId: randomBytes(8).toString('hex'), name: 'during the outage', start: 1n, end: 2n },
      ]);
      spanStatuses.push((await post(`${server.url}/v1/traces`, body, { 'content-type': 'application/json' })).status);
    }
  // Every runner has met the outage before it ends.
  await until(
    async () => {
      for (const runner of runners) if (!/the store is away/.test(runner.output())) throw new Error('not yet');
    },
    60_000 + outageSeconds * 1000,
  );
  await sleep(Math.max(0, down + outageSeconds * 1000 - Date.now()));

  await cluster.start();
  const up = Date.now();
  await retried(() => a.waitForRollouts(ids, 120 + outageSeconds));
  const recoverySeconds = (Date.now() - up) / 1000;
  for (const runner of runners) runner.child.kill('SIGINT');
  const runnerCodes = await Promise.all(runners.map((runner) => runner.exited));

  // LISTEN is back on b: a long poll there waits for a notification (it no longer looks on its
  // own every 0.5 s), and an enqueue on a wakes it. Its first look has registered the worker.
  await until(async () => {
    const answer = (await (await fetch(`${servers[1].url}/v1/agl/health`)).json()) as { status: string };
    if (answer.status !== 'ok') throw new Error(JSON.stringify(answer));
  }, 30_000);
  const waiting = b.dequeueRollout({ workerId: 'listen-check', waitSeconds: 60 });
  await until(async () => {
    if (!(await a.getWorkerById('listen-check'))) throw new Error('not waiting yet');
  }, 30_000);
  const [checked] = await a.enqueueManyRollouts([{ input: { listen: true } }]);
  let timer: NodeJS.Timeout | undefined;
  const woken = await Promise.race([
    waiting,
    new Promise<'not woken'>((resolve) => (timer = setTimeout(() => resolve('not woken'), 30_000))),
  ]);
  clearTimeout(timer);
  const listenWoke = woken !== 'not woken' && woken?.rollout_id === checked.rollout_id;
  if (woken && woken !== 'not woken')
    await a.updateAttempt(woken.rollout_id, (woken as AttemptedRollout).attempt.attempt_id, { status: 'succeeded' });
  else await waiting;

  const all = [...ids, checked.rollout_id];
  const attempts = new Map<string, string[]>();
  const statuses = new Map<string, string>();
  for (const id of all) {
    attempts.set(
      id,
      (await a.queryAttempts(id)).items.map((attempt) => attempt.status),
    );
    statuses.set(id, (await a.getRolloutById(id))?.status ?? 'missing');
  }
  const spansStored = await Promise.all(
    servers.map(async (server, i) => {
      const list = traces[i].map((id) => `'${id}'`).join(',');
      const found = await new QueryClient(server.url).query(
        `SELECT DISTINCT trace_id FROM spans WHERE trace_id IN (${list})`,
      );
      return { sent: traces[i].length, found: found.rows.length };
    }),
  );
  const outageLine = /the store is away|the store answers again/;
  return {
    database: cluster.address,
    outageSeconds,
    unresponsiveSeconds,
    rollouts: all.length,
    finishedBefore,
    enqueue,
    query,
    health,
    spanStatuses,
    spansStored,
    recoverySeconds,
    attempts,
    statuses,
    runnerLines: runners.map((runner) =>
      runner
        .output()
        .split('\n')
        .filter((line) => outageLine.test(line)),
    ),
    runnerCodes,
    listenWoke,
    serversAlive: servers.every((server) => server.child.exitCode === null && server.child.signalCode === null),
    serverOutputs: servers.map((server) => server.output()),
  };
}
