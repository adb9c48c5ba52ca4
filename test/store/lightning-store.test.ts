import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidQueryError, NotFoundError } from '../../src/api/errors.js';
import { DuckDBStore } from '../../src/store/store.js';
import { startAgl, tempDir, until } from '../support/helpers.js';
import { StoreClient } from '../../src/client/store-client.js';
import type { LightningStore } from '../../src/api/lightning-store.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';
import { startProxy } from '../support/proxy.js';

type Context = { after(fn: () => Promise<void>): void };

async function openStore(t: Context, path?: string, state?: string): Promise<DuckDBStore> {
  const store = await DuckDBStore.open({ path: path ?? join(await tempDir(t), 'lightning.duckdb'), state });
  t.after(() => store.close());
  return store;
}

// One PostgreSQL cluster for this file, started by the first test that needs it; each test gets
// a database of its own.
let cluster: Promise<PostgresCluster> | undefined;
const database = () => {
  cluster ??= startPostgres();
  return cluster.then((c) => c.createDatabase());
};
// A cluster that could not start already failed each test that needed it, with the reason.
after(async () => (await cluster?.catch(() => undefined))?.stop());

// Every semantic test runs against each variant: the embedded store (also with no finished
// rollout held in memory), StoreClient talking to agl
// serve's REST API, the store with its state in PostgreSQL, and StoreClient talking to two
// servers on one PostgreSQL database behind nginx, so that code works unchanged against any.
const variants: [string, (t: Context) => Promise<{ lightning: LightningStore }>][] = [
  ['embedded', (t) => openStore(t)],
  // Every finished rollout read from the file, as a server that ran for days reads most of them.
  [
    'embedded, finished rollouts in the file only',
    async (t) => {
      const store = await DuckDBStore.open({
        path: join(await tempDir(t), 'lightning.duckdb'),
        finishedRolloutsInMemory: 0,
      });
      t.after(() => store.close());
      return store;
    },
  ],
  [
    'over HTTP',
    async (t) => {
      const agl = await startAgl(join(await tempDir(t), 'lightning-http.duckdb'));
      t.after(() => agl.close());
      return { lightning: new StoreClient(agl.url) };
    },
  ],
  ['postgres', async (t) => openStore(t, undefined, await database())],
  [
    'postgres, two servers behind nginx',
    async (t) => {
      const dir = await tempDir(t);
      const state = await database();
      const servers = [
        await startAgl(join(dir, 'a.duckdb'), { state }),
        await startAgl(join(dir, 'b.duckdb'), { state }),
      ];
      t.after(() => Promise.all(servers.map((s) => s.close())).then(() => {}));
      const proxy = await startProxy(servers.map((s) => s.url));
      t.after(() => proxy.stop());
      return { lightning: new StoreClient(proxy.url) };
    },
  ],
];

for (const [label, open] of variants) {
  test(`${label}: enqueued rollouts are dequeued first in, first out, each with a new attempt`, async (t) => {
    const { lightning: ls } = await open(t);
    const [a, b, c] = await ls.enqueueManyRollouts([
      { input: 'a' },
      { input: { q: 'b' }, mode: 'train' },
      { input: 3 },
    ]);
    assert.match(a.rollout_id, /^ro-[0-9a-f]{12}$/);
    assert.equal(a.status, 'queuing');
    assert.deepEqual(a.config, {
      timeout_seconds: null,
      unresponsive_seconds: null,
      max_attempts: 1,
      retry_condition: [],
    });
    await ls.updateRollout(b.rollout_id, { status: 'cancelled' });
    const taken = await ls.dequeueManyRollouts({ limit: 5, workerId: 'w1' });
    assert.deepEqual(
      taken.map((r) => r.rollout_id),
      [a.rollout_id, c.rollout_id],
      'a cancelled rollout is skipped',
    );
    for (const r of taken) {
      assert.equal(r.status, 'preparing');
      assert.equal(r.attempt.status, 'preparing');
      assert.equal(r.attempt.sequence_id, 1);
      assert.equal(r.attempt.worker_id, 'w1');
      assert.match(r.attempt.attempt_id, /^at-[0-9a-f]{8}$/);
    }
    assert.equal(await ls.dequeueRollout(), null, 'an empty queue gives nothing');
    assert.equal(a.status, 'queuing', 'what a call returned is a snapshot, not the live state');
    assert.deepEqual(await ls.dequeueManyRollouts({ limit: 0 }), []);
    const worker = await ls.getWorkerById('w1');
    assert.equal(worker?.status, 'busy');
    assert.equal(worker?.current_rollout_id, c.rollout_id);
  });

  test(`${label}: a failed latest attempt requeues the rollout while attempts remain, then fails it`, async (t) => {
    const { lightning: ls } = await open(t);
    const rollout = await ls.enqueueRollout({
      input: 1,
      config: { max_attempts: 2, retry_condition: ['failed', 'timeout'] },
    });
    const first = await ls.dequeueRollout();
    assert.ok(first);
    await ls.updateAttempt(rollout.rollout_id, first.attempt.attempt_id, { status: 'failed' });
    let now = await ls.getRolloutById(rollout.rollout_id);
    assert.ok(now);
    assert.equal(now.status, 'requeuing');
    assert.equal(now.end_time, null);
    const second = await ls.dequeueRollout();
    assert.ok(second);
    assert.equal(second.rollout_id, rollout.rollout_id);
    assert.equal(second.attempt.sequence_id, 2);
    // Only the latest attempt speaks for the rollout.
    await ls.updateAttempt(rollout.rollout_id, first.attempt.attempt_id, { status: 'succeeded' });
    assert.equal((await ls.getRolloutById(rollout.rollout_id))?.status, 'preparing');
    const failed = await ls.updateAttempt(rollout.rollout_id, 'latest', { status: 'failed' });
    assert.equal(failed.attempt_id, second.attempt.attempt_id);
    assert.ok(failed.end_time !== null && failed.end_time >= failed.start_time);
    now = await ls.getRolloutById(rollout.rollout_id);
    assert.ok(now);
    assert.equal(now.status, 'failed', 'no attempts left');
    assert.ok(now.end_time !== null);
    // startAttempt creates an attempt whatever max_attempts says.
    const third = await ls.startAttempt(rollout.rollout_id, 'w2');
    assert.equal(third.attempt.sequence_id, 3);
    assert.equal(third.status, 'preparing');
    const attempts = await ls.queryAttempts(rollout.rollout_id);
    assert.deepEqual(
      attempts.items.map((a) => a.sequence_id),
      [1, 2, 3],
    );
    assert.equal(attempts.total, 3);
  });

  test(`${label}: a status not in retry_condition fails the rollout at once`, async (t) => {
    const { lightning: ls } = await open(t);
    const rollout = await ls.enqueueRollout({ input: 1, config: { max_attempts: 3, retry_condition: ['timeout'] } });
    await ls.dequeueRollout();
    await ls.updateAttempt(rollout.rollout_id, 'latest', { status: 'failed' });
    assert.equal((await ls.getRolloutById(rollout.rollout_id))?.status, 'failed');
  });

  test(`${label}: the watchdog times out attempts and marks silent ones unresponsive`, async (t) => {
    const { lightning: ls } = await open(t);
    const slow = await ls.enqueueRollout({
      input: 'slow',
      config: { timeout_seconds: 0.05, max_attempts: 2, retry_condition: ['timeout'] },
    });
    const silent = await ls.enqueueRollout({ input: 'silent', config: { unresponsive_seconds: 0.05 } });
    await ls.dequeueManyRollouts({ limit: 2, workerId: 'w' });
    // The watchdog runs on a timer (PostgreSQL's every 100 ms): waited for, not slept past.
    await until(async () => {
      const slowNow = (await ls.getRolloutById(slow.rollout_id)) as { status: string; attempt: { status: string } };
      assert.equal(slowNow.attempt.status, 'timeout');
      assert.equal(slowNow.status, 'requeuing');
      const silentNow = (await ls.getRolloutById(silent.rollout_id)) as { status: string; attempt: { status: string } };
      assert.equal(silentNow.attempt.status, 'unresponsive');
      assert.equal(silentNow.status, 'failed');
      assert.equal((await ls.getWorkerById('w'))?.status, 'unknown');
    }, 5_000);
  });

  test(`${label}: a span revives an unresponsive attempt but not a timed-out one`, async (t) => {
    const { lightning: ls } = await open(t);
    const [late, silent] = await ls.enqueueManyRollouts([
      { input: 'late', config: { timeout_seconds: 0.05 } },
      { input: 'silent', config: { unresponsive_seconds: 0.05 } },
    ]);
    const taken = await ls.dequeueManyRollouts({ limit: 2 });
    await until(async () => {
      assert.equal((await ls.getLatestAttempt(late.rollout_id))?.status, 'timeout');
      assert.equal((await ls.getLatestAttempt(silent.rollout_id))?.status, 'unresponsive');
    }, 5_000);
    const span = (rolloutId: string, attemptId: string, spanId: string) => ({
      rollout_id: rolloutId,
      attempt_id: attemptId,
      sequence_id: 1,
      trace_id: '7c8efff798038103d269b633813fc60c',
      span_id: spanId,
      parent_id: null,
      name: 'late span',
      status: { status_code: 'UNSET' as const, description: null },
      attributes: {},
      events: [],
      links: [],
      start_time: null,
      end_time: null,
      context: null,
      parent: null,
      resource: { attributes: {}, schema_url: '' },
    });
    await ls.addSpan(span(late.rollout_id, taken[0].attempt.attempt_id, '0000000000000011'));
    await ls.addSpan(span(silent.rollout_id, taken[1].attempt.attempt_id, '0000000000000012'));
    assert.equal(
      (await ls.getLatestAttempt(late.rollout_id))?.status,
      'timeout',
      'a timed-out attempt stays timed out',
    );
    assert.equal(
      (await ls.getLatestAttempt(silent.rollout_id))?.status,
      'running',
      'an unresponsive attempt runs again',
    );
    await assert.rejects(ls.addSpan(span('ro-unknown', 'at-x', '0000000000000013')), NotFoundError);
  });

  test(`${label}: a heartbeat sent with updateAttempt runs a preparing attempt and revives an unresponsive one`, async (t) => {
    const { lightning: ls } = await open(t);
    const [fresh, silent] = await ls.enqueueManyRollouts([
      { input: 'fresh' },
      { input: 'silent', config: { unresponsive_seconds: 0.05 } },
    ]);
    const taken = await ls.dequeueManyRollouts({ limit: 2 });
    await ls.updateAttempt(fresh.rollout_id, taken[0].attempt.attempt_id, { last_heartbeat_time: Date.now() / 1000 });
    const running = (await ls.getRolloutById(fresh.rollout_id)) as { status: string; attempt: { status: string } };
    assert.equal(running.status, 'running');
    assert.equal(running.attempt.status, 'running');
    await until(
      async () => assert.equal((await ls.getLatestAttempt(silent.rollout_id))?.status, 'unresponsive'),
      5_000,
    );
    const beat = Date.now() / 1000;
    const revived = await ls.updateAttempt(silent.rollout_id, 'latest', { last_heartbeat_time: beat });
    assert.equal(revived.status, 'running');
    assert.equal(revived.last_heartbeat_time, beat);
    assert.equal((await ls.getLatestAttempt(silent.rollout_id))?.status, 'running');
  });

  test(`${label}: resources are versioned; new rollouts get the latest`, async (t) => {
    const { lightning: ls } = await open(t);
    assert.equal(await ls.getLatestResources(), null);
    const prompt = { resource_type: 'prompt_template' as const, template: 'Answer: {q}', engine: 'f-string' as const };
    const first = await ls.addResources({ prompt });
    assert.match(first.resources_id, /^rs-[0-9a-f]{12}$/);
    assert.equal(first.version, 1);
    const rollout = await ls.enqueueRollout({ input: 1 });
    assert.equal(rollout.resources_id, first.resources_id);
    await sleep(5);
    const second = await ls.updateResources(first.resources_id, {
      prompt: { ...prompt, template: 'Think, then answer: {q}' },
    });
    assert.equal(second.version, 2);
    assert.equal(second.create_time, first.create_time);
    assert.ok(second.update_time > first.update_time);
    const named = await ls.updateResources('rs-mine', { prompt });
    assert.equal(named.version, 1);
    assert.equal((await ls.getLatestResources())?.resources_id, 'rs-mine', 'latest is the one updated last');
    assert.equal((await ls.queryResources()).total, 2);
  });

  test(`${label}: waitForRollouts returns finished rollouts as they finish, unknown ids left out`, async (t) => {
    const { lightning: ls } = await open(t);
    const [a, b] = await ls.enqueueManyRollouts([{ input: 'a' }, { input: 'b' }]);
    assert.deepEqual(await ls.waitForRollouts([a.rollout_id, 'ro-unknown'], 0), []);
    const waiting = ls.waitForRollouts([a.rollout_id, b.rollout_id, 'ro-unknown'], 30);
    await ls.dequeueManyRollouts({ limit: 2 });
    await ls.updateAttempt(a.rollout_id, 'latest', { status: 'succeeded' });
    await ls.updateRollout(b.rollout_id, { status: 'cancelled' });
    const done = await waiting;
    assert.deepEqual(
      done.map((r) => [r.rollout_id, r.status]),
      [
        [a.rollout_id, 'succeeded'],
        [b.rollout_id, 'cancelled'],
      ],
    );
    const partial = await ls.waitForRollouts(
      [a.rollout_id, (await ls.enqueueRollout({ input: 'c' })).rollout_id],
      0.05,
    );
    assert.deepEqual(
      partial.map((r) => r.rollout_id),
      [a.rollout_id],
      'the deadline returns what finished',
    );
  });

  test(`${label}: a waiting dequeue is woken by the next enqueue`, async (t) => {
    const { lightning: ls } = await open(t);
    const waiting = ls.dequeueRollout({ waitSeconds: 30 });
    const rollout = await ls.enqueueRollout({ input: 'late' });
    assert.equal((await waiting)?.rollout_id, rollout.rollout_id);
  });

  // A cut-off HTTP request could have taken a rollout on the server: StoreClient waits its wait out.
  if (!(label === 'over HTTP' || label.endsWith('behind nginx')))
    test(`${label}: an aborted dequeue wait answers nothing and takes nothing`, async (t) => {
      const { lightning: ls } = await open(t);
      const stop = new AbortController();
      const waiting = ls.dequeueRollout({ workerId: 'w', waitSeconds: 3600, signal: stop.signal });
      stop.abort();
      assert.equal(await waiting, null);
      const rollout = await ls.enqueueRollout({ input: 'after the stop' });
      assert.equal((await ls.getRolloutById(rollout.rollout_id))?.status, 'queuing');
      assert.equal((await ls.dequeueRollout({ signal: stop.signal }))?.rollout_id, rollout.rollout_id);
    });

  test(`${label}: 100 concurrent runners never get the same attempt`, async (t) => {
    const { lightning: ls } = await open(t);
    await ls.enqueueManyRollouts(Array.from({ length: 300 }, (_, i) => ({ input: i })));
    const runner = async (id: number) => {
      const got: string[] = [];
      for (
        let r = await ls.dequeueRollout({ workerId: `w${id}` });
        r;
        r = await ls.dequeueRollout({ workerId: `w${id}` })
      )
        got.push(r.rollout_id);
      return got;
    };
    const all = (await Promise.all(Array.from({ length: 100 }, (_, i) => runner(i)))).flat();
    assert.equal(all.length, 300);
    assert.equal(new Set(all).size, 300);
  });

  test(`${label}: updates tell an absent field from null; unknown ids are NotFoundError`, async (t) => {
    const { lightning: ls } = await open(t);
    const rollout = await ls.enqueueRollout({ input: 'x', mode: 'val', metadata: { a: 1 } });
    const updated = await ls.updateRollout(rollout.rollout_id, { metadata: null });
    assert.equal(updated.mode, 'val', 'absent: unchanged');
    assert.equal(updated.metadata, null, 'null: cleared');
    await assert.rejects(ls.updateRollout('ro-nope', { status: 'failed' }), NotFoundError);
    await assert.rejects(ls.updateAttempt(rollout.rollout_id, 'latest', { status: 'failed' }), /has no attempts/);
    assert.equal(await ls.getRolloutById('ro-nope'), null);
    await assert.rejects(ls.queryRollouts({ limit: 0 }), InvalidQueryError);
    await assert.rejects(ls.queryRollouts({ sort_by: 'nope' }), /sort_by must be one of/);
    await assert.rejects(ls.queryRollouts({ offset: -1 }), /offset/);
  });

  test(`${label}: a client-named rollout is enqueued once and keeps its state; named attempts are unique`, async (t) => {
    const { lightning: ls } = await open(t);
    const [first] = await ls.enqueueManyRollouts([{ input: 'a', rollout_id: 'r-named' }]);
    assert.equal(first.rollout_id, 'r-named');
    const started = await ls.startAttempt('r-named', null, '0');
    assert.equal(started.attempt.attempt_id, '0');
    const [again, fresh] = await ls.enqueueManyRollouts([{ input: 'changed', rollout_id: 'r-named' }, { input: 'b' }]);
    assert.deepEqual(
      [again.rollout_id, again.input, again.status],
      ['r-named', 'a', 'preparing'],
      'a retry changes nothing',
    );
    assert.notEqual(fresh.rollout_id, 'r-named');
    assert.equal((await ls.queryRollouts({ rollout_id_in: ['r-named'] })).total, 1);
    await assert.rejects(ls.startAttempt('r-named', null, '0'), /has an attempt 0 already/);
    await assert.rejects(ls.startRollout({ input: 'c', rollout_id: 'r-named' }), /exists already/);
    assert.equal((await ls.queryAttempts('r-named')).total, 1);
  });

  test(`${label}: rollouts are queried with filters, sorting and paging`, async (t) => {
    const { lightning: ls } = await open(t);
    const made = await ls.enqueueManyRollouts([{ input: 1 }, { input: 2 }, { input: 3 }]);
    await ls.dequeueRollout();
    const queuing = await ls.queryRollouts({
      status_in: ['queuing'],
      sort_by: 'start_time',
      sort_order: 'desc',
      limit: 1,
    });
    assert.equal(queuing.total, 2);
    assert.equal(queuing.items.length, 1);
    const byId = await ls.queryRollouts({ rollout_id_in: [made[0].rollout_id] });
    assert.equal(
      (byId.items[0] as { attempt?: unknown }).attempt !== undefined,
      true,
      'rollouts come with their latest attempt',
    );
  });

  test(`${label}: rollouts are filtered by mode and by text in their input (agl's own filters)`, async (t) => {
    const { lightning: ls } = await open(t);
    const [train, val] = await ls.enqueueManyRollouts([
      { input: { question: 'What is 12 + 30?' }, mode: 'train' },
      { input: { question: 'What is 7 * 6?' }, mode: 'val' },
      { input: 'plain text with 12' },
    ]);
    const ids = (page: { items: { rollout_id: string }[] }) => page.items.map((r) => r.rollout_id);
    assert.deepEqual(ids(await ls.queryRollouts({ mode_in: ['val'] })), [val.rollout_id]);
    assert.deepEqual(ids(await ls.queryRollouts({ input_contains: '12 + 30' })), [train.rollout_id]);
    assert.equal((await ls.queryRollouts({ input_contains: '12' })).total, 2);
    assert.equal((await ls.queryRollouts({ input_contains: '12', mode_in: ['train', 'test'] })).total, 1);
    assert.equal(
      (await ls.queryRollouts({ input_contains: '7 * 6', mode_in: ['train'], filter_logic: 'or' })).total,
      2,
    );
    await ls.updateRollout(val.rollout_id, { input: { question: 'changed' } });
    assert.equal((await ls.queryRollouts({ input_contains: '7 * 6' })).total, 0, 'an updated input is searched anew');
  });
}

test('state survives a restart: the queue, attempts, resources and workers', async (t) => {
  const path = join(await tempDir(t), 'restart.duckdb');
  const before = await DuckDBStore.open({ path });
  const ls = before.lightning;
  const res = await ls.addResources({
    llm: {
      resource_type: 'llm',
      endpoint: 'http://127.0.0.1:1/v1',
      model: 'm',
      api_key: null,
      sampling_parameters: {},
    },
  });
  const [a, b] = await ls.enqueueManyRollouts([{ input: 'a' }, { input: 'b' }]);
  const running = await ls.dequeueRollout({ workerId: 'w' });
  assert.ok(running);
  assert.equal(running.rollout_id, a.rollout_id);
  await before.close();

  const after = await openStore(t, path);
  const again = after.lightning;
  assert.deepEqual(await again.getLatestResources(), res);
  assert.equal((await again.getLatestAttempt(a.rollout_id))?.attempt_id, running.attempt.attempt_id);
  assert.equal((await again.dequeueRollout())?.rollout_id, b.rollout_id, 'b is still queued');
  assert.equal((await again.getWorkerById('w'))?.status, 'busy');
  const stats = await again.statistics();
  assert.deepEqual(
    [stats.total_rollouts, stats.total_attempts, stats.total_resources, stats.total_workers],
    [2, 2, 1, 1],
  );
});

test('postgres: state survives a restart, every server sees it in SQL, and a file keeps the kind of state it holds', async (t) => {
  const dir = await tempDir(t);
  const state = await database();
  const path = join(dir, 'shared.duckdb');
  const first = await DuckDBStore.open({ path, state });
  const [a, b] = await first.lightning.enqueueManyRollouts([{ input: 'a' }, { input: 'b' }]);
  const running = await first.lightning.dequeueRollout({ workerId: 'w' });
  assert.equal(running?.rollout_id, a.rollout_id);
  await first.close();

  // A second server, with a file of its own, shares the queue and sees the state in SQL.
  const other = await openStore(t, join(dir, 'other.duckdb'), state);
  assert.equal((await other.lightning.dequeueRollout({ workerId: 'w2' }))?.rollout_id, b.rollout_id);
  assert.equal((await other.lightning.getLatestAttempt(a.rollout_id))?.attempt_id, running?.attempt.attempt_id);
  const sql = 'SELECT rollout_id, status FROM rollouts ORDER BY start_time, rollout_id';
  const expected = [a, b]
    .sort((x, y) => x.start_time - y.start_time || x.rollout_id.localeCompare(y.rollout_id))
    .map((r) => ({ rollout_id: r.rollout_id, status: 'preparing' }));
  assert.deepEqual((await other.query(sql)).rows, expected);

  // The first file, opened again, continues its copy from where it stopped.
  const again = await DuckDBStore.open({ path, state });
  try {
    assert.deepEqual((await again.query(sql)).rows, expected);
    assert.equal((await again.query("SELECT status FROM workers WHERE worker_id = 'w2'")).rows[0].status, 'busy');
    const stats = await again.lightning.statistics();
    assert.deepEqual([stats.total_rollouts, stats.total_attempts, stats.total_workers], [2, 2, 2]);
  } finally {
    await again.close();
  }
  await assert.rejects(DuckDBStore.open({ path }), /holds a copy of the state kept in PostgreSQL/);
  const own = join(dir, 'own.duckdb');
  const embedded = await DuckDBStore.open({ path: own });
  await embedded.lightning.enqueueRollout({ input: 'mine' });
  await embedded.close();
  await assert.rejects(DuckDBStore.open({ path: own, state }), /holds rollouts of its own/);
});

test('postgres: the watchdogs of two servers act once on each overdue attempt', async (t) => {
  const dir = await tempDir(t);
  const state = await database();
  const a = await openStore(t, join(dir, 'a.duckdb'), state);
  const b = await openStore(t, join(dir, 'b.duckdb'), state);
  const config = { timeout_seconds: 0.05, max_attempts: 2, retry_condition: ['timeout' as const] };
  await a.lightning.enqueueManyRollouts(Array.from({ length: 20 }, (_, i) => ({ input: i, config })));
  assert.equal((await b.lightning.dequeueManyRollouts({ limit: 20, workerId: 'w' })).length, 20);
  await sleep(100);
  await Promise.all([a, b, a, b].map((store) => store.lightning.watchdog()));
  const timedOut = await a.query(
    "SELECT key, count(*)::INTEGER AS n FROM state_history WHERE kind = 'attempt' AND (data->>'status') = 'timeout' GROUP BY key",
  );
  assert.equal(timedOut.rows.length, 20);
  assert.deepEqual(new Set(timedOut.rows.map((r) => r.n)), new Set([1]), 'each attempt timed out once');
  const requeued = await b.lightning.queryRollouts({ status_in: ['requeuing'] });
  assert.equal(requeued.total, 20);
});
