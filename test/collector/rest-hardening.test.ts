import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { columnsDdl } from '../../src/store/appender.js';
import { DuckDBStore } from '../../src/store/store.js';
import { SPAN_COLUMNS } from '../../src/otlp/span-columns.js';
import type { StoreStatistics } from '../../src/api/lightning-store.js';
import type { AttemptedRollout, PaginatedResult, ResourcesUpdate, Rollout, Span } from '../../src/api/types.js';
import { queryRows, startAgl, tempDir, type InProcessAgl } from '../support/helpers.js';

// Bodies of the LightningStore REST API that once broke the server, and writes that fail.

/** A REST call; `Answer` is the body the test expects (its assertions check it). */
async function call<Answer = unknown>(
  agl: InProcessAgl,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<{ status: number; json: Answer }> {
  const response = await fetch(`${agl.url}/v1/agl${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Answer };
}

async function ok<Answer = unknown>(
  agl: InProcessAgl,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<Answer> {
  const { status, json } = await call<Answer>(agl, method, path, body);
  assert.ok(status >= 200 && status < 300, `${method} ${path}: ${status} ${JSON.stringify(json)}`);
  return json;
}

const nested = (depth: number): unknown => {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
};

const spanOf = (rolloutId: string, attemptId: string, spanId: string, extra: Record<string, unknown> = {}) => ({
  rollout_id: rolloutId,
  attempt_id: attemptId,
  trace_id: 'ab'.repeat(16),
  span_id: spanId,
  name: 'step',
  start_time: 1_700_000_000,
  end_time: 1_700_000_001,
  ...extra,
});

test('a rollout input nested 2,000 deep is a 400 naming where; reads and dequeue keep answering', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'deep.duckdb'));
  t.after(() => agl.close());

  const refused = await call<{ detail: string }>(agl, 'POST', '/queues/rollouts/enqueue', {
    rollouts: [{ input: nested(2_000) }],
  });
  assert.equal(refused.status, 400);
  assert.match(refused.json.detail, /nests deeper than 64 levels at rollouts\[0\]\.input\.a\.a/);
  assert.ok(refused.json.detail.length < 300, 'the message stays short');

  assert.deepEqual((await ok<PaginatedResult<Rollout>>(agl, 'GET', '/rollouts')).items, []);
  assert.deepEqual((await ok<PaginatedResult<Rollout>>(agl, 'POST', '/rollouts/search', {})).items, []);
  assert.deepEqual(await ok<AttemptedRollout[]>(agl, 'POST', '/queues/rollouts/dequeue', {}), []);

  // Every JSON field of a body is held to the same limit.
  const started = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: nested(50) });
  const deepSpan = await call<{ detail: string }>(
    agl,
    'POST',
    '/spans',
    spanOf(started.rollout_id, started.attempt.attempt_id, '1'.repeat(16), { attributes: { x: nested(100) } }),
  );
  assert.equal(deepSpan.status, 400);
  assert.match(deepSpan.json.detail, /at attributes\.x\.a/);
  const deepStats = await call<{ detail: string }>(agl, 'POST', '/workers/w1', { heartbeat_stats: nested(100) });
  assert.equal(deepStats.status, 400);
  assert.match(deepStats.json.detail, /at heartbeat_stats\.a/);
  assert.equal((await ok<PaginatedResult<Rollout>>(agl, 'GET', '/rollouts')).items.length, 1);
});

test('a lone surrogate in a REST body is stored as U+FFFD, and the views still read', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'unicode.duckdb'));
  t.after(() => agl.close());
  const send = (path: string, text: string) =>
    fetch(`${agl.url}/v1/agl${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: text });

  const enqueued = await send(
    '/queues/rollouts/enqueue',
    '{"rollouts":[{"input":"a\\ud800","metadata":{"k\\udc00":"v"}}]}',
  );
  assert.equal(enqueued.status, 201);
  const [rollout] = (await enqueued.json()) as { input: string; metadata: object }[];
  assert.equal(rollout.input, 'a\ufffd');
  assert.deepEqual(rollout.metadata, { 'k\ufffd': 'v' });
  const started = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: 1 });
  const span = JSON.stringify(
    spanOf(started.rollout_id, started.attempt.attempt_id, '1'.repeat(16), { attributes: { a: 'SURROGATE' } }),
  );
  assert.equal((await send('/spans', span.replace('SURROGATE', '\\ud800'))).status, 201);

  for (const view of ['rollouts', 'spans', 'llm_calls'])
    await ok(agl, 'POST', '/query', { sql: `SELECT * FROM ${view}` });
});

test('a stored rollout row that DuckDB cannot read as JSON does not stop the store from opening', async (t) => {
  const path = join(await tempDir(t), 'legacy.duckdb');
  await (await DuckDBStore.open({ path })).close();
  // As an older agl stored it: the appender does not check JSON, and JSON.stringify writes a
  // lone surrogate as an escape that DuckDB's JSON functions refuse.
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  const appender = await connection.createAppender('state_history');
  const rollout = {
    rollout_id: 'ro-legacy',
    input: 'a\ud800',
    start_time: 1,
    end_time: null,
    mode: null,
    resources_id: null,
    status: 'queuing',
    config: {},
    metadata: {},
  };
  for (const value of ['rollout', 'ro-legacy']) appender.appendVarchar(value);
  appender.appendBigInt(1n);
  appender.appendVarchar(JSON.stringify(rollout));
  appender.endRow();
  appender.closeSync();
  connection.closeSync();
  instance.closeSync();

  const agl = await startAgl(path);
  t.after(() => agl.close());
  const [dequeued] = await ok<AttemptedRollout[]>(agl, 'POST', '/queues/rollouts/dequeue', {});
  assert.equal(dequeued.rollout_id, 'ro-legacy');
});

/** Everything the GET routes tell about the store's state (uptime aside). */
async function stateSeen(agl: InProcessAgl): Promise<unknown> {
  const rollouts = (await ok<PaginatedResult<Rollout>>(agl, 'GET', '/rollouts')).items as { rollout_id: string }[];
  const perRollout = [];
  for (const { rollout_id: id } of rollouts) {
    perRollout.push({
      rollout: await ok(agl, 'GET', `/rollouts/${id}`),
      attempts: await ok(agl, 'GET', `/rollouts/${id}/attempts`),
      latest: await ok(agl, 'GET', `/rollouts/${id}/attempts/latest`),
      spans: await ok<PaginatedResult<Span>>(agl, 'GET', `/spans?rollout_id=${id}`),
    });
  }
  const { uptime: _, ...statistics } = await ok<StoreStatistics>(agl, 'GET', '/statistics');
  return {
    rollouts,
    perRollout,
    searched: await ok<PaginatedResult<Rollout>>(agl, 'POST', '/rollouts/search', {
      status_in: ['queuing', 'running'],
    }),
    workers: await ok(agl, 'GET', '/workers'),
    resources: await ok(agl, 'GET', '/resources'),
    latestResources: await ok(agl, 'GET', '/resources/latest'),
    statistics,
  };
}

/**
 * A database file whose writes fail for real: state_history refuses rows that name a marker, and
 * attempt rows of one worker once they run (a span's heartbeat is what makes them run); spans
 * refuse the marker as a name.
 */
async function failingDatabase(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const path = join(await tempDir(t), 'failing.duckdb');
  await (await DuckDBStore.open({ path })).close();
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  await connection.run(`DROP TABLE state_history;
    CREATE TABLE state_history (kind VARCHAR NOT NULL, key VARCHAR NOT NULL, version BIGINT NOT NULL, data JSON NOT NULL,
      CHECK (NOT contains(data, 'fail-this-write') AND NOT (contains(data, 'fail-when-running') AND (data->>'status') = 'running')));
    DROP TABLE spans;
    ${columnsDdl('spans', SPAN_COLUMNS).replace(/\n\)$/, ",\n  CHECK (name <> 'fail-this-write'))")};
    ALTER TABLE spans ADD COLUMN commit_seq BIGINT;`);
  connection.closeSync();
  instance.closeSync();
  return path;
}

test('a write that fails leaves the rollout state as it was, for every REST write route', async (t) => {
  const agl = await startAgl(await failingDatabase(t));
  t.after(() => agl.close());

  const llm = (endpoint: string) => ({ llm: { resource_type: 'llm', endpoint, model: 'm' } });
  const resources = await ok<ResourcesUpdate>(agl, 'POST', '/resources', llm('http://model'));
  const [a, b, c] = await ok<Rollout[]>(agl, 'POST', '/queues/rollouts/enqueue', {
    rollouts: [{ input: 'a' }, { input: 'b' }, { input: 'c' }],
  });
  const [taken] = await ok<AttemptedRollout[]>(agl, 'POST', '/queues/rollouts/dequeue', { worker_id: 'w1' });
  assert.equal(taken.rollout_id, a.rollout_id);
  const d = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: 'd', worker_id: 'fail-when-running' });
  await ok(agl, 'POST', '/spans', spanOf(a.rollout_id, taken.attempt.attempt_id, '1'.repeat(16), { sequence_id: 1 }));
  await ok(agl, 'POST', '/workers/w2', { heartbeat_stats: { gpu: 1 } });
  const before = await stateSeen(agl);

  const marked = { x: 'fail-this-write' };
  const failing: [string, string, unknown][] = [
    ['enqueue', '/queues/rollouts/enqueue', { rollouts: [{ input: 'e', metadata: marked }] }],
    ['dequeue', '/queues/rollouts/dequeue', { worker_id: 'fail-this-write' }],
    ['start a rollout', '/rollouts', { input: 'fail-this-write' }],
    ['update a rollout', `/rollouts/${a.rollout_id}`, { status: 'succeeded', metadata: marked }],
    ['start an attempt', `/rollouts/${b.rollout_id}/attempts`, { worker_id: 'fail-this-write' }],
    [
      'update an attempt',
      `/rollouts/${a.rollout_id}/attempts/${taken.attempt.attempt_id}`,
      { status: 'succeeded', metadata: marked },
    ],
    ['add resources', '/resources', llm('fail-this-write')],
    ['update resources', `/resources/${resources.resources_id}`, llm('fail-this-write')],
    ['update a worker', '/workers/w2', { heartbeat_stats: marked }],
    [
      'add a span (a heartbeat)',
      '/spans',
      spanOf(d.rollout_id, d.attempt.attempt_id, '2'.repeat(16), { sequence_id: 1 }),
    ],
    [
      'add a span (a heartbeat written later)',
      '/spans',
      spanOf(a.rollout_id, taken.attempt.attempt_id, '3'.repeat(16), { name: 'fail-this-write' }),
    ],
  ];
  for (const [name, route, body] of failing) {
    const { status } = await call(agl, 'POST', route, body);
    assert.ok(status >= 500, `${name}: the write fails (${status})`);
    assert.deepEqual(await stateSeen(agl), before, `${name}: the state is as it was`);
  }

  // Later writes succeed, on the state as it was: the queue kept its order.
  const [next] = await ok<AttemptedRollout[]>(agl, 'POST', '/queues/rollouts/dequeue', { worker_id: 'w2' });
  assert.equal(next.rollout_id, b.rollout_id);
  assert.equal((await ok<AttemptedRollout[]>(agl, 'POST', '/queues/rollouts/dequeue', {}))[0].rollout_id, c.rollout_id);
  await ok(agl, 'POST', `/rollouts/${a.rollout_id}/attempts/latest`, { status: 'succeeded' });
  assert.equal((await ok<AttemptedRollout>(agl, 'GET', `/rollouts/${a.rollout_id}`)).status, 'succeeded');
  // The version counter went back too: the history has no gap where the failed writes were.
  const [history] = await queryRows(
    agl.store,
    'SELECT count(*)::INTEGER AS n, max(version)::INTEGER AS last FROM state_history',
  );
  assert.equal(history.last, history.n);
});

test('after writes that fail among others in flight, the state is what the file holds', async (t) => {
  const path = await failingDatabase(t);
  let agl = await startAgl(path);
  t.after(() => agl.close());
  await ok<Rollout[]>(agl, 'POST', '/queues/rollouts/enqueue', { rollouts: [{ input: 0 }, { input: 1 }] });

  // Failing and good writes in overlapping waves: a good one may fail with a bad one in its group
  // commit, and later ones build on changes whose writes are still in flight.
  const calls = [];
  for (let i = 0; i < 12; i++) {
    const worker = i % 3 === 0 ? 'fail-this-write' : `w${i}`;
    const wave = [
      call(agl, 'POST', '/queues/rollouts/enqueue', {
        rollouts: [{ input: i, metadata: i % 4 === 0 ? { x: 'fail-this-write' } : {} }],
      }),
      call(agl, 'POST', '/queues/rollouts/dequeue', { worker_id: worker }),
      call(agl, 'POST', `/workers/${worker}`, { heartbeat_stats: { i } }),
    ];
    calls.push(...wave);
    await wave[0];
  }
  const statuses = (await Promise.all(calls)).map((r) => r.status);
  assert.ok(
    statuses.some((s) => s >= 500),
    statuses.join(' '),
  );
  await ok<Rollout[]>(agl, 'POST', '/queues/rollouts/enqueue', { rollouts: [{ input: 'after' }] });

  const seen = await stateSeen(agl);
  await agl.close();
  agl = await startAgl(path);
  assert.deepEqual(await stateSeen(agl), seen);
});

test('a span with sequence_id 0 is stored with 0, as Agent Lightning stores it', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'sequence.duckdb'));
  t.after(() => agl.close());
  const started = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: 1 });
  const ids = [started.rollout_id, started.attempt.attempt_id] as const;

  const zero = await call<Span>(agl, 'POST', '/spans', spanOf(...ids, '1'.repeat(16), { sequence_id: 0 }));
  assert.equal(zero.status, 201);
  assert.equal(zero.json.sequence_id, 0);
  // The counter keeps the highest id seen: the next one handed out is still 1.
  assert.deepEqual(await ok(agl, 'POST', '/spans/next', { rollout_id: ids[0], attempt_id: ids[1] }), {
    sequence_id: 1,
  });
  const stored = await ok<PaginatedResult<Span>>(agl, 'GET', `/spans?rollout_id=${ids[0]}`);
  assert.deepEqual(
    stored.items.map((s: { sequence_id: number }) => s.sequence_id),
    [0],
  );
});

test('odd span and resource bodies are 400s naming the field, not 500s or values stored wrong', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'odd.duckdb'));
  t.after(() => agl.close());
  const started = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: 1 });
  const span = (extra: Record<string, unknown>) =>
    spanOf(started.rollout_id, started.attempt.attempt_id, '3'.repeat(16), extra);

  const cases: [Record<string, unknown>, RegExp][] = [
    [{ events: [null] }, /^events\[0\] must be an object/],
    [{ events: [{ timestamp: 1 }] }, /^events\[0\]\.name is required$/],
    [{ events: [{ name: 5 }] }, /^events\[0\]\.name must be a string, not 5$/],
    [{ links: [{}] }, /^links\[0\]\.context is required$/],
    [{ links: [{ context: 5 }] }, /^links\[0\]\.context must be an object, not 5$/],
    [{ links: [{ context: { trace_id: 5 } }] }, /^links\[0\]\.context\.trace_id must be a string/],
    // Past what a span's nanosecond timestamps hold, and past what JSON numbers hold exactly.
    [{ start_time: 1e300 }, /^start_time must be a number of at least 0 and at most/],
    [{ events: [{ name: 'e', timestamp: 1e19 }] }, /^events\[0\]\.timestamp must be a number/],
    [
      { links: [{ context: { trace_id: 'x', span_id: 'y' }, attributes: [] }] },
      /^links\[0\]\.attributes must be an object/,
    ],
    [{ sequence_id: 1e300 }, /^sequence_id must be an integer/],
    // A context is Agent Lightning's SpanContext (is_remote and trace_state may be left out).
    [{ context: { trace_id: 'x' } }, /^context\.span_id is required$/],
    [
      { parent: { trace_id: 'x', span_id: 'y', trace_state: { k: 1 } } },
      /^parent\.trace_state\.k must be a string, not 1$/,
    ],
    [{ status: { status_code: 'OK', description: 5 } }, /^status\.description must be a string, not 5$/],
  ];
  for (const [extra, message] of cases) {
    const { status, json } = await call<{ detail: string }>(agl, 'POST', '/spans', span(extra));
    assert.equal(status, 400, JSON.stringify(extra));
    assert.match(json.detail, message);
  }
  assert.equal((await ok<PaginatedResult<Span>>(agl, 'GET', `/spans?rollout_id=${started.rollout_id}`)).total, 0);

  // Messages quote what was sent, cut short: an id or a field name may be megabytes.
  const long = 'x'.repeat(1_000_000);
  for (const [path, body, status] of [
    ['/spans', span({ rollout_id: long }), 404],
    ['/rollouts/search', { sort_by: long }, 400],
    ['/resources', { [long]: { resource_type: 'llm', endpoint: 'e', model: 5 } }, 400],
  ] as const) {
    const refused = await call<{ detail: string }>(agl, 'POST', path, body);
    assert.equal(refused.status, status);
    assert.ok(refused.json.detail.length < 500, `${path}: ${refused.json.detail.length} characters`);
  }

  // Agent Lightning's LLM resource: sampling_parameters a dict, api_key a string or null.
  const llm = { resource_type: 'llm', endpoint: 'http://model', model: 'm' };
  for (const [extra, message] of [
    [{ sampling_parameters: 5 }, /^main\.sampling_parameters must be an object/],
    [{ api_key: 7 }, /^main\.api_key must be a string/],
  ] as const) {
    const { status, json } = await call<{ detail: string }>(agl, 'POST', '/resources', { main: { ...llm, ...extra } });
    assert.equal(status, 400);
    assert.match(json.detail, message);
  }
  assert.deepEqual(
    await ok(agl, 'POST', '/spans/next', { rollout_id: started.rollout_id, attempt_id: started.attempt.attempt_id }),
    { sequence_id: 1 },
  );
});

test('span searches with a NUL character or quotes in a filter answer, and match exactly', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'search.duckdb'));
  t.after(() => agl.close());
  const started = await ok<AttemptedRollout>(agl, 'POST', '/rollouts', { input: 1 });
  const ids = [started.rollout_id, started.attempt.attempt_id] as const;
  await ok(agl, 'POST', '/spans', spanOf(...ids, '2'.repeat(16), { name: "a\u0000b'c" }));
  await ok(agl, 'POST', '/spans', spanOf(...ids, '3'.repeat(16), { name: 'ab' }));
  // DuckDB's parser ends a statement at a NUL: the filter was a 500 ("unterminated quoted string").
  const found = await ok<PaginatedResult<Span>>(agl, 'POST', '/spans/search', {
    rollout_id: ids[0],
    name_contains: "\u0000b'",
  });
  assert.deepEqual(
    found.items.map((s: { name: string }) => s.name),
    ["a\u0000b'c"],
  );
  assert.equal(
    (await ok<PaginatedResult<Span>>(agl, 'POST', '/spans/search', { rollout_id: `${ids[0]}\u0000` })).items.length,
    0,
  );
  assert.equal((await ok<PaginatedResult<Span>>(agl, 'GET', `/spans?rollout_id=${ids[0]}&name=ab`)).items.length, 1);
});
