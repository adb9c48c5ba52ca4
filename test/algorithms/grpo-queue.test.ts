import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { tableFromIPC } from 'apache-arrow';
import { InvalidQueryError } from '../../src/api/errors.js';
import type { TrainingDone } from '../../src/api/training.js';
import type { TrainingBatch } from '../../src/algorithms/grpo/arrow.js';
import { BatchQueue } from '../../src/algorithms/grpo/queue.js';
import { startAgl, tempDir } from '../support/helpers.js';

// The HTTP hand-off on its own: a BatchQueue served by a real agl server on 127.0.0.1, batches
// offered by hand. Leases, re-offers, 404/409/400, the token, and the Arrow stream's schema.

const batch = (step: number): TrainingBatch => ({
  batchId: `batch-${step}`,
  step,
  modelVersion: '0',
  estimator: 'grpo',
  aggregation: 'transition',
  rows: [
    {
      groupId: 'g1',
      rolloutId: 'ro-1',
      attemptId: 'at-1',
      modelVersion: '0',
      promptIds: Int32Array.of(1, 2, 3),
      responseIds: Int32Array.of(4, 5),
      responseMask: Int8Array.of(1, 0),
      responseLogprobs: Float32Array.of(-0.5, 0),
      reward: 1,
      rolloutReward: 1,
    },
    {
      groupId: 'g1',
      rolloutId: 'ro-2',
      attemptId: 'at-2',
      modelVersion: '0',
      promptIds: Int32Array.of(1),
      responseIds: Int32Array.of(6),
      responseMask: Int8Array.of(1),
      responseLogprobs: Float32Array.of(-0.25),
      reward: 0,
      rolloutReward: 0,
    },
  ],
  advantages: [0.5, -0.5],
  settings: { steps: 3, batchSize: 1, groupSize: 2, temperature: 0.7 },
});

/** A queue whose dones are recorded; a model version "taken" is refused as a run would. */
function queue(leaseSeconds: number) {
  const dones: [string, TrainingDone][] = [];
  const batches = new BatchQueue(leaseSeconds, async (b, done) => {
    if (done.model?.version === 'taken') throw new InvalidQueryError('model.version "taken" was published before');
    dones.push([b.batchId, done]);
    return { batch_id: b.batchId, step: b.step, model_version: done.model?.version ?? '0' };
  });
  return { batches, dones };
}

async function serve(t: { after(fn: () => Promise<void>): void }, batches: BatchQueue, token?: string) {
  const agl = await startAgl(join(await tempDir(t), 'queue.duckdb'), { training: batches, token });
  t.after(() => agl.close());
  return agl.url;
}

const next = (url: string, query = '', headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/agl/training/batches/next${query}`, { headers });
const done = (url: string, id: string, body: unknown) =>
  fetch(`${url}/v1/agl/training/batches/${id}/done`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

test('next: 204 when none is ready, 200 with the batch as an Arrow stream, its id and lease in headers', async (t) => {
  const { batches } = queue(60);
  const url = await serve(t, batches);
  assert.equal((await next(url)).status, 204);
  const stop = new AbortController();
  t.after(() => stop.abort());
  // A waiting trainer gets the batch as soon as it is offered.
  const waiting = next(url, '?wait=30');
  await batches.offer(batch(1), stop.signal);
  const response = await waiting;
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('content-type'), 'application/vnd.apache.arrow.stream');
  assert.deepEqual(
    ['agl-batch-id', 'agl-step', 'agl-model-version', 'agl-lease-seconds'].map((h) => response.headers.get(h)),
    ['batch-1', '1', '0', '60'],
  );
  const table = tableFromIPC(new Uint8Array(await response.arrayBuffer()));
  assert.deepEqual(
    table.schema.fields.map((f) => `${f.name}: ${f.type}`),
    [
      'batch_id: Utf8',
      'step: Int32',
      'group_id: Utf8',
      'rollout_id: Utf8',
      'attempt_id: Utf8',
      'model_version: Utf8',
      'prompt_ids: List<Int32>',
      'response_ids: List<Int32>',
      'response_mask: List<Int8>',
      'response_logprobs: List<Float32>',
      'reward: Float32',
      'advantage: Float32',
    ],
  );
  assert.deepEqual(Object.fromEntries(table.schema.metadata), {
    'agl.batch_id': 'batch-1',
    'agl.step': '1',
    'agl.model_version': '0',
    'agl.estimator': 'grpo',
    'agl.aggregation': 'transition',
    'agl.steps': '3',
    'agl.batch_size': '1',
    'agl.group_size': '2',
    'agl.temperature': '0.7',
  });
  const rows = table.toArray().map((row) => row.toJSON());
  assert.deepEqual(
    rows.map((r) => [r.group_id, r.rollout_id, [...r.prompt_ids], [...r.response_ids], [...r.response_mask]]),
    [
      ['g1', 'ro-1', [1, 2, 3], [4, 5], [1, 0]],
      ['g1', 'ro-2', [1], [6], [1]],
    ],
  );
  assert.deepEqual(
    rows.map((r) => [[...r.response_logprobs], r.reward, r.advantage]),
    [
      [[-0.5, 0], 1, 0.5],
      [[-0.25], 0, -0.5],
    ],
  );
  // Leased: no one else gets it while the lease runs.
  assert.equal((await next(url)).status, 204);
});

test('a batch not done within its lease is handed out again: same id, same bytes', async (t) => {
  const { batches, dones } = queue(0.2);
  const url = await serve(t, batches);
  const stop = new AbortController();
  t.after(() => stop.abort());
  const { done: finished } = await batches.offer(batch(1), stop.signal);
  const first = await next(url);
  const bytes = Buffer.from(await first.arrayBuffer());
  // The lease runs out while this request waits: it gets the batch again.
  const again = await next(url, '?wait=30');
  assert.equal(again.headers.get('agl-batch-id'), 'batch-1');
  assert.ok(Buffer.from(await again.arrayBuffer()).equals(bytes));
  const answer = await done(url, 'batch-1', {
    metrics: { loss: 0.12 },
    model: { endpoint: 'http://m/v1', model: 'tiny', version: '2' },
  });
  assert.equal(answer.status, 200);
  assert.deepEqual(await answer.json(), { batch_id: 'batch-1', step: 1, model_version: '2' });
  assert.deepEqual(await finished, {
    metrics: { loss: 0.12 },
    model: { endpoint: 'http://m/v1', model: 'tiny', version: '2' },
  });
  assert.equal(dones.length, 1);
  // Done: it is never handed out again.
  assert.equal((await next(url, '?wait=0.3')).status, 204);
});

test('done: 404 for an unknown batch, 409 for one done already, 400 naming a bad field, or a refused model', async (t) => {
  const { batches, dones } = queue(60);
  const url = await serve(t, batches);
  const stop = new AbortController();
  t.after(() => stop.abort());
  await batches.offer(batch(1), stop.signal);
  assert.equal((await next(url)).status, 200);

  const unknown = await done(url, 'batch-9', {});
  assert.equal(unknown.status, 404);
  assert.match(((await unknown.json()) as { detail: string }).detail, /no training batch batch-9/);
  const badMetric = await done(url, 'batch-1', { metrics: { loss: 'low' } });
  assert.equal(badMetric.status, 400);
  assert.match(((await badMetric.json()) as { detail: string }).detail, /^metrics\.loss must be a finite number/);
  const noEndpoint = await done(url, 'batch-1', { model: { model: 'tiny' } });
  assert.match(((await noEndpoint.json()) as { detail: string }).detail, /^model\.endpoint is required/);
  const badVersion = await done(url, 'batch-1', { model: { endpoint: 'http://m/v1', model: 'tiny', version: 'a b' } });
  assert.match(((await badVersion.json()) as { detail: string }).detail, /^model\.version must be 1 to 128 printable/);
  const taken = await done(url, 'batch-1', { model: { endpoint: 'http://m/v1', model: 'tiny', version: 'taken' } });
  assert.equal(taken.status, 400);
  assert.match(((await taken.json()) as { detail: string }).detail, /published before/);
  assert.equal(dones.length, 0);

  // A refused done leaves the batch with its trainer: the first good one ends it, a second conflicts.
  assert.equal((await done(url, 'batch-1', {})).status, 200);
  const twice = await done(url, 'batch-1', {});
  assert.equal(twice.status, 409);
  assert.match(((await twice.json()) as { detail: string }).detail, /batch-1 is done already/);
  assert.deepEqual(dones, [['batch-1', { metrics: {} }]]);
  // Bad waits.
  for (const wait of ['abc', '-1', '301']) {
    const response = await next(url, `?wait=${wait}`);
    assert.equal(response.status, 400);
    assert.match(((await response.json()) as { detail: string }).detail, /^wait must be a number/);
  }
});

test('the token: batches need Authorization like every route', async (t) => {
  const { batches } = queue(60);
  const url = await serve(t, batches, 'secret');
  assert.equal((await next(url)).status, 401);
  assert.equal((await next(url, '', { authorization: 'Bearer secret' })).status, 204);
});

test('a run that stops withdraws its batches: a late done conflicts, waiting trainers get none', async (t) => {
  const { batches } = queue(60);
  const url = await serve(t, batches);
  const stop = new AbortController();
  const { done: finished } = await batches.offer(batch(1), stop.signal);
  assert.equal((await next(url)).status, 200);
  stop.abort();
  assert.equal(await finished, null);
  assert.equal((await done(url, 'batch-1', {})).status, 409);
  const waiting = next(url, '?wait=30');
  batches.close();
  assert.equal((await waiting).status, 204);
});
