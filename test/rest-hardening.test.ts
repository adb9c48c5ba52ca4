import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { startAgl, tempDir, type InProcessAgl } from './helpers.js';

// Bodies of the LightningStore REST API that once broke the server, and writes that fail.

async function call(agl: InProcessAgl, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(`${agl.url}/v1/agl${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, json: await response.json() };
}

async function ok(agl: InProcessAgl, method: 'GET' | 'POST', path: string, body?: unknown): Promise<any> {
  const { status, json } = await call(agl, method, path, body);
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

  const refused = await call(agl, 'POST', '/queues/rollouts/enqueue', { rollouts: [{ input: nested(2_000) }] });
  assert.equal(refused.status, 400);
  assert.match(refused.json.detail, /nests deeper than 64 levels at rollouts\[0\]\.input\.a\.a/);
  assert.ok(refused.json.detail.length < 300, 'the message stays short');

  assert.deepEqual((await ok(agl, 'GET', '/rollouts')).items, []);
  assert.deepEqual((await ok(agl, 'POST', '/rollouts/search', {})).items, []);
  assert.deepEqual(await ok(agl, 'POST', '/queues/rollouts/dequeue', {}), []);

  // Every JSON field of a body is held to the same limit.
  const started = await ok(agl, 'POST', '/rollouts', { input: nested(50) });
  const deepSpan = await call(agl, 'POST', '/spans', spanOf(started.rollout_id, started.attempt.attempt_id, '1'.repeat(16), { attributes: { x: nested(100) } }));
  assert.equal(deepSpan.status, 400);
  assert.match(deepSpan.json.detail, /at attributes\.x\.a/);
  const deepStats = await call(agl, 'POST', '/workers/w1', { heartbeat_stats: nested(100) });
  assert.equal(deepStats.status, 400);
  assert.match(deepStats.json.detail, /at heartbeat_stats\.a/);
  assert.equal((await ok(agl, 'GET', '/rollouts')).items.length, 1);
});

test('a span with sequence_id 0 is stored with 0, as Agent Lightning stores it', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'sequence.duckdb'));
  t.after(() => agl.close());
  const started = await ok(agl, 'POST', '/rollouts', { input: 1 });
  const ids = [started.rollout_id, started.attempt.attempt_id] as const;

  const zero = await call(agl, 'POST', '/spans', spanOf(...ids, '1'.repeat(16), { sequence_id: 0 }));
  assert.equal(zero.status, 201);
  assert.equal(zero.json.sequence_id, 0);
  // The counter keeps the highest id seen: the next one handed out is still 1.
  assert.deepEqual(await ok(agl, 'POST', '/spans/next', { rollout_id: ids[0], attempt_id: ids[1] }), { sequence_id: 1 });
  const stored = await ok(agl, 'GET', `/spans?rollout_id=${ids[0]}`);
  assert.deepEqual(stored.items.map((s: { sequence_id: number }) => s.sequence_id), [0]);
});

test('odd span bodies are 400s naming the field, not 500s or values stored wrong', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'odd.duckdb'));
  t.after(() => agl.close());
  const started = await ok(agl, 'POST', '/rollouts', { input: 1 });
  const span = (extra: Record<string, unknown>) => spanOf(started.rollout_id, started.attempt.attempt_id, '3'.repeat(16), extra);

  const cases: [Record<string, unknown>, RegExp][] = [
    [{ events: [null] }, /^events\[0\] must be an object/],
    [{ events: [{ timestamp: 1 }] }, /^events\[0\]\.name must be a string/],
    [{ links: [{}] }, /^links\[0\]\.context must be an object/],
    [{ links: [{ context: { trace_id: 5 } }] }, /^links\[0\]\.context\.trace_id must be a string/],
    // Past what a span's nanosecond timestamps hold, and past what JSON numbers hold exactly.
    [{ start_time: 1e300 }, /^start_time must be a number of at least 0 and at most/],
    [{ events: [{ name: 'e', timestamp: 1e19 }] }, /^events\[0\]\.timestamp must be a number/],
    [{ links: [{ context: { trace_id: 'x', span_id: 'y' }, attributes: [] }] }, /^links\[0\]\.attributes must be an object/],
    [{ sequence_id: 1e300 }, /^sequence_id must be an integer/],
  ];
  for (const [extra, message] of cases) {
    const { status, json } = await call(agl, 'POST', '/spans', span(extra));
    assert.equal(status, 400, JSON.stringify(extra));
    assert.match(json.detail, message);
  }
  assert.equal((await ok(agl, 'GET', `/spans?rollout_id=${started.rollout_id}`)).total, 0);
  assert.deepEqual(await ok(agl, 'POST', '/spans/next', { rollout_id: started.rollout_id, attempt_id: started.attempt.attempt_id }), { sequence_id: 1 });
});
