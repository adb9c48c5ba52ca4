import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { newTempDir, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';

// Agent Lightning v1's rollouts on a fleet: two agl servers sharing one PostgreSQL state, as
// behind a load balancer, each answering v1's calls about rollouts the other changed.

let dir: string;
let cluster: PostgresCluster;
let servers: InProcessAgl[];

before(async () => {
  dir = await newTempDir();
  cluster = await startPostgres();
  const state = await cluster.createDatabase();
  servers = [await startAgl(`${dir}/a.duckdb`, { state }), await startAgl(`${dir}/b.duckdb`, { state })];
});
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  await cluster.stop();
  await removeDir(dir);
});

async function call(server: InProcessAgl, method: string, path: string, body?: unknown) {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

test('two servers on one PostgreSQL share v1 rollouts: enqueue once, one transition wins, one cursor', async () => {
  const [a, b] = servers;
  const group = [0, 1, 2].map((i) => ({ rollout_id: `pg-${i}`, input: { data_id: `d${i}` } }));
  const [first, again] = await Promise.all([
    call(a, 'POST', '/api/rollouts', group),
    call(b, 'POST', '/api/rollouts', group),
  ]);
  assert.deepEqual([first.status, again.status], [201, 201]);
  const queued = await call(b, 'GET', '/api/rollouts?state_in=queuing&limit=100');
  assert.deepEqual(
    queued.body.map((r: { rollout_id: string }) => r.rollout_id).sort(),
    ['pg-0', 'pg-1', 'pg-2'],
    'a retried enqueue on the other server made no second group',
  );

  // Two controllers start the same rollout at once, one on each server: one wins, the other is told.
  const starts = await Promise.all(
    [a, b].map((s) => call(s, 'PATCH', '/api/rollouts/pg-0', { status: { state: 'running', last_attempt_id: '0' } })),
  );
  assert.deepEqual(starts.map((s) => s.status).sort(), [200, 409]);
  const detail = await call(a, 'GET', '/api/rollouts/pg-0');
  assert.deepEqual([detail.body.rollout.status.state, detail.body.attempts], ['running', ['0']]);

  assert.equal((await call(b, 'PATCH', '/api/rollouts/pg-0', { status: { state: 'succeeded' } })).status, 200);
  assert.equal((await call(a, 'PATCH', '/api/rollouts/pg-1', { status: { state: 'failed' } })).status, 200);
  assert.equal(
    (await call(a, 'POST', '/api/rollouts/pg-0/attempt/0/events', { event_type: 'note', data: { x: 1 } })).status,
    200,
  );
  const cursors = await Promise.all([a, b].map((s) => call(s, 'GET', '/api/rollouts/terminal?after=0')));
  for (const cursor of cursors) {
    assert.deepEqual(
      cursor.body.items.map((i: { rollout_id: string; state: string }) => [i.rollout_id, i.state]),
      [
        ['pg-0', 'succeeded'],
        ['pg-1', 'failed'],
      ],
    );
    assert.equal(cursor.body.next_after, 2);
  }
  assert.equal((await call(b, 'DELETE', '/api/rollouts/pg-1')).status, 204);
  assert.equal((await call(a, 'GET', '/api/rollouts/pg-1')).status, 404, 'deleted for every server');
  const state = await call(b, 'GET', '/api/rollouts/pg-0');
  assert.equal(state.body.rollout.status.version, 3);
});
