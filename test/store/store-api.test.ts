import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { StoreStatistics } from '../../src/api/lightning-store.js';
import type {
  Attempt,
  AttemptedRollout,
  LlmResource,
  PaginatedResult,
  ResourcesUpdate,
  Rollout,
  Span,
  Worker,
} from '../../src/api/types.js';
import { newTempDir, post, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';
import { otlpJsonRequest } from '../support/span-fixtures.js';

// The LightningStore REST API, spoken the way Agent Lightning's LightningStoreClient speaks it,
// against a server that keeps the state in its DuckDB file and one that keeps it in PostgreSQL.

let cluster: PostgresCluster | undefined;
after(() => cluster?.stop());

const backends: [string, () => Promise<string | undefined>][] = [
  ['state in DuckDB', async () => undefined],
  [
    'state in PostgreSQL',
    async () => {
      cluster ??= await startPostgres();
      return cluster.createDatabase();
    },
  ],
];

for (const [backend, stateUrl] of backends)
  describe(backend, () => {
    let dir: string;
    let agl: InProcessAgl;
    before(async () => {
      dir = await newTempDir();
      agl = await startAgl(join(dir, 'api.duckdb'), { state: await stateUrl() });
    });
    after(async () => {
      await agl?.close(); // undefined when before failed, e.g. without PostgreSQL
      await removeDir(dir);
    });

    /** A REST call; `Answer` is the body the test expects (its assertions check it). */
    async function call<Answer = unknown>(
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

    test('a rollout goes from enqueue to dequeue to succeeded over REST', async () => {
      const enqueued = await call<Rollout[]>('POST', '/queues/rollouts/enqueue', {
        rollouts: [{ input: { q: '2+2' }, mode: 'train' }],
      });
      assert.equal(enqueued.status, 201);
      const [rollout] = enqueued.json;
      assert.equal(rollout.status, 'queuing');
      assert.equal(rollout.mode, 'train');
      assert.deepEqual(rollout.metadata, {});

      const dequeued = await call<AttemptedRollout[]>('POST', '/queues/rollouts/dequeue', {
        limit: 1,
        worker_id: 'runner-1',
      });
      assert.equal(dequeued.status, 200);
      assert.equal(dequeued.json[0].rollout_id, rollout.rollout_id);
      const attempt = dequeued.json[0].attempt;
      assert.equal(attempt.sequence_id, 1);
      assert.deepEqual(
        (await call('POST', '/queues/rollouts/dequeue')).json,
        [],
        'no body means the defaults; an empty queue is []',
      );

      const updated = await call<Attempt>('POST', `/rollouts/${rollout.rollout_id}/attempts/latest`, {
        status: 'succeeded',
      });
      assert.equal(updated.status, 200);
      assert.equal(updated.json.attempt_id, attempt.attempt_id);
      const got = await call<AttemptedRollout>('GET', `/rollouts/${rollout.rollout_id}`);
      assert.equal(got.json.status, 'succeeded');
      assert.equal(got.json.attempt.status, 'succeeded');
      assert.equal(typeof got.json.end_time, 'number');
      const waited = await call<Rollout[]>('POST', '/waits/rollouts', {
        rollout_ids: [rollout.rollout_id, 'ro-missing'],
        timeout: 0,
      });
      assert.deepEqual(
        waited.json.map((r) => r.rollout_id),
        [rollout.rollout_id],
      );
      const worker = await call<Worker>('GET', '/workers/runner-1');
      assert.equal(worker.json.status, 'idle');

      // SQL users see the same state in the views.
      const sql = await agl.store.query(
        `SELECT r.status, r.mode, r.input, typeof(r.start_time) AS t, a.sequence_id, a.status AS attempt_status, w.status AS worker_status
     FROM rollouts r JOIN attempts a USING (rollout_id) JOIN workers w ON w.worker_id = a.worker_id
     WHERE r.rollout_id = '${rollout.rollout_id}'`,
      );
      assert.deepEqual(sql.rows, [
        {
          status: 'succeeded',
          mode: 'train',
          input: { q: '2+2' },
          t: 'DOUBLE',
          sequence_id: 1,
          attempt_status: 'succeeded',
          worker_status: 'idle',
        },
      ]);
    });

    test('an OTLP span is a heartbeat: the attempt and its rollout run', async () => {
      const started = await call<AttemptedRollout>('POST', '/rollouts', { input: 'direct', worker_id: 'runner-2' });
      assert.equal(started.status, 201);
      const { rollout_id: rolloutId, attempt } = started.json;
      assert.equal(started.json.status, 'preparing');
      const span = {
        resourceSpans: [
          {
            resource: {
              attributes: [
                { key: 'agentlightning.rollout_id', value: { stringValue: rolloutId } },
                { key: 'agentlightning.attempt_id', value: { stringValue: attempt.attempt_id } },
              ],
            },
            scopeSpans: [
              { spans: [{ traceId: '5b8efff798038103d269b633813fc60d', spanId: 'eee19b7ec3c1b171', name: 'llm' }] },
            ],
          },
        ],
      };
      assert.equal(
        (await post(`${agl.url}/v1/traces`, JSON.stringify(span), { 'content-type': 'application/json' })).status,
        200,
      );
      const got = await call<AttemptedRollout>('GET', `/rollouts/${rolloutId}`);
      assert.equal(got.json.status, 'running');
      assert.equal(got.json.attempt.status, 'running');
      assert.equal(typeof got.json.attempt.last_heartbeat_time, 'number');
      const next = await call('POST', '/spans/next', { rollout_id: rolloutId, attempt_id: attempt.attempt_id });
      assert.deepEqual(next.json, { sequence_id: 2 }, 'the span took sequence id 1');
    });

    test('concurrent span requests of several rollouts number each rollout 1, 2, 3 ... without a gap', async () => {
      const enqueued = await call<Rollout[]>('POST', '/queues/rollouts/enqueue', {
        rollouts: [{ input: 1 }, { input: 2 }, { input: 3 }],
      });
      const started = await call<AttemptedRollout[]>('POST', '/queues/rollouts/dequeue', {
        limit: 3,
        worker_id: 'numbering',
      });
      assert.equal(started.json.length, 3);
      // 60 requests of two spans at once (on PostgreSQL they are numbered a group at a time).
      const requests = Array.from({ length: 60 }, (_, i) => {
        const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');
        const spans = [0, 1].map((k) => ({
          traceId: hex(i + 1, 32),
          spanId: hex(2 * i + k + 1, 16),
          name: `step-${i}-${k}`,
          start: 1_700_000_000_000_000_000n + BigInt(k),
        }));
        const body = otlpJsonRequest(spans, started.json[i % 3]);
        return post(`${agl.url}/v1/traces`, body, { 'content-type': 'application/json' });
      });
      for (const answer of await Promise.all(requests)) assert.equal(answer.status, 200);
      for (const rollout of enqueued.json) {
        const spans = await call<PaginatedResult<Span>>('GET', `/spans?rollout_id=${rollout.rollout_id}&limit=100`);
        assert.deepEqual(
          spans.json.items.map((span) => span.sequence_id),
          Array.from({ length: 40 }, (_, i) => i + 1),
        );
        // Within a request, in start-time order.
        for (let i = 0; i < 40; i += 2)
          assert.deepEqual([spans.json.items[i].name.slice(-2), spans.json.items[i + 1].name.slice(-2)], ['-0', '-1']);
      }
    });

    test('resources are added, updated and read back; unknown ids are null', async () => {
      const llm = { resource_type: 'llm', endpoint: 'http://127.0.0.1:9/v1', model: 'qwen' };
      const added = await call<ResourcesUpdate>('POST', '/resources', { llm });
      assert.equal(added.status, 201);
      assert.equal(added.json.version, 1);
      assert.deepEqual(added.json.resources.llm, { ...llm, api_key: null, sampling_parameters: {} });
      const updated = await call<ResourcesUpdate>('POST', `/resources/${added.json.resources_id}`, {
        llm: { ...llm, model: 'qwen-2' },
      });
      assert.equal(updated.json.version, 2);
      assert.equal(
        ((await call<ResourcesUpdate>('GET', '/resources/latest')).json.resources.llm as LlmResource).model,
        'qwen-2',
      );
      assert.equal((await call('GET', '/resources/rs-nothing')).json, null);
      assert.equal((await call('GET', '/rollouts/ro-nothing')).json, null);
      assert.equal((await call('GET', '/rollouts/ro-nothing/attempts/latest')).json, null);
      const page = await call<PaginatedResult<ResourcesUpdate>>(
        'GET',
        `/resources?resources_id_contains=${added.json.resources_id.slice(3, 9)}`,
      );
      assert.equal(page.json.total, 1);
    });

    test('bad bodies and parameters are 400s that name the field; unknown ids on updates are 404s', async () => {
      const cases: [string, string, unknown, number, RegExp][] = [
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: [{ mode: 'train' }] },
          400,
          /rollouts\[0\]\.input is required/,
        ],
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: [{ input: 1, mode: 'prod' }] },
          400,
          /rollouts\[0\]\.mode must be one of train, val, test/,
        ],
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: [{ input: 1, config: { max_attempts: 0 } }] },
          400,
          /max_attempts must be an integer of at least 1/,
        ],
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: [{ input: 1, config: { retry_condition: ['exploded'] } }] },
          400,
          /retry_condition\[0\] must be one of/,
        ],
        ['POST', '/queues/rollouts/enqueue', { items: [] }, 400, /^rollouts is required$/],
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: { input: 1 } },
          400,
          /^rollouts must be a list, not \{"input":1\}$/,
        ],
        ['POST', '/queues/rollouts/dequeue', { limit: 'many' }, 400, /limit must be an integer/],
        [
          'POST',
          '/resources',
          { p: { resource_type: 'model' } },
          400,
          /p\.resource_type must be one of llm, proxy_llm, prompt_template/,
        ],
        ['POST', '/resources', { p: { resource_type: 'llm', model: 'm' } }, 400, /^p\.endpoint is required$/],
        ['GET', '/rollouts?limit=0', undefined, 400, /limit must be greater than 0, or -1/],
        ['GET', '/rollouts?offset=-2', undefined, 400, /offset/],
        ['GET', '/rollouts?sort_by=color', undefined, 400, /sort_by must be one of rollout_id/],
        ['GET', '/rollouts?sort_order=up', undefined, 400, /sort_order must be one of asc, desc/],
        ['GET', '/rollouts?filter_logic=xor', undefined, 400, /filter_logic must be one of and, or/],
        ['GET', '/rollouts?status_in=lost', undefined, 400, /status_in\[0\] must be one of/],
        ['GET', '/rollouts?mode_in=eval', undefined, 400, /mode_in\[0\] must be one of train, val, test/],
        ['POST', '/rollouts/ro-nothing', { status: 'failed' }, 404, /no rollout ro-nothing/],
        ['POST', '/rollouts/ro-nothing/attempts', {}, 404, /no rollout ro-nothing/],
        ['POST', '/spans/next', { rollout_id: 'ro-x' }, 400, /^attempt_id is required$/],
        ['POST', '/spans/next', { rollout_id: '', attempt_id: 'at-x' }, 400, /^rollout_id is required$/],
        ['POST', '/waits/rollouts', { rollout_ids: 'ro-x' }, 400, /^rollout_ids must be a list, not "ro-x"$/],
        ['POST', '/waits/rollouts', { rollout_ids: ['ro-x', 7] }, 400, /^rollout_ids\[1\] must be a string, not 7$/],
        [
          'POST',
          '/rollouts/ro-x/attempts/latest',
          { last_heartbeat_time: null },
          400,
          /^last_heartbeat_time is invalid; it cannot be a null value$/,
        ],
      ];
      for (const [method, path, body, status, message] of cases) {
        const answer = await call<{ detail: string }>(method as 'GET' | 'POST', path, body);
        assert.equal(answer.status, status, `${method} ${path}`);
        assert.match(answer.json.detail, message, `${method} ${path}`);
      }
      const rollout = (await call<Rollout[]>('POST', '/queues/rollouts/enqueue', { rollouts: [{ input: 1 }] })).json[0];
      const nullStatus = await call<{ detail: string }>('POST', `/rollouts/${rollout.rollout_id}`, { status: null });
      assert.equal(nullStatus.status, 400);
      assert.match(nullStatus.json.detail, /status is invalid; it cannot be a null value/);
      const cleared = await call<Rollout>('POST', `/rollouts/${rollout.rollout_id}`, { metadata: null, mode: 'val' });
      assert.equal(cleared.json.metadata, null);
      assert.equal(cleared.json.mode, 'val');
      const notJson = await fetch(`${agl.url}/v1/agl/queues/rollouts/enqueue`, {
        method: 'POST',
        body: '{"rollouts": [',
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(notJson.status, 400);
    });

    test('a wrong type deep in a body or query is a 400 naming its whole path and what was sent', async () => {
      const cases: [string, string, unknown, string][] = [
        [
          'POST',
          '/resources',
          { main: { resource_type: 'llm', endpoint: 5, model: 'm' } },
          'main.endpoint must be a string, not 5',
        ],
        [
          'POST',
          '/queues/rollouts/enqueue',
          { rollouts: [{ input: 1 }, { input: 2, config: { retry_condition: ['failed', 3] } }] },
          'rollouts[1].config.retry_condition[1] must be one of preparing, running, succeeded, failed, cancelled, timeout, unresponsive, not 3',
        ],
        [
          'POST',
          '/rollouts',
          { input: 1, config: { timeout_seconds: -1 } },
          'config.timeout_seconds must be a number of at least 0, not -1',
        ],
        ['GET', '/rollouts?limit=ten', undefined, 'limit must be an integer, not "ten"'],
      ];
      for (const [method, path, body, detail] of cases) {
        const answer = await call<{ detail: string }>(method as 'GET' | 'POST', path, body);
        assert.equal(answer.status, 400, path);
        assert.equal(answer.json.detail, detail);
      }
    });

    test('queries page through rollouts with repeated status_in, and POST search takes the same fields', async () => {
      const made = (
        await call<Rollout[]>('POST', '/queues/rollouts/enqueue', {
          rollouts: [{ input: 'p1' }, { input: 'p2' }, { input: 'p3' }],
        })
      ).json;
      await call('POST', `/rollouts/${made[0].rollout_id}`, { status: 'cancelled' });
      const page = await call<PaginatedResult<Rollout>>(
        'GET',
        `/rollouts?status_in=queuing&status_in=cancelled&limit=2&offset=0&sort_by=start_time`,
      );
      assert.equal(page.status, 200);
      assert.equal(page.json.limit, 2);
      assert.equal(page.json.items.length, 2);
      assert.ok(page.json.total >= 3);
      const search = await call<PaginatedResult<Rollout>>('POST', '/rollouts/search', {
        rollout_id_in: made.map((r) => r.rollout_id),
        status_in: ['queuing'],
      });
      assert.deepEqual(
        search.json.items.map((r) => r.rollout_id).sort(),
        [made[1].rollout_id, made[2].rollout_id].sort(),
      );
      const stats = await call<StoreStatistics>('GET', '/statistics');
      assert.ok(stats.json.total_rollouts >= 3);
      assert.equal(typeof stats.json.uptime, 'number');
    });

    test('a dequeue with wait_seconds and a wait for rollouts are long polls resolved by events', async () => {
      await call('POST', '/queues/rollouts/dequeue', { limit: 100 });
      const waitingDequeue = call<AttemptedRollout[]>('POST', '/queues/rollouts/dequeue', {
        wait_seconds: 30,
        worker_id: 'poller',
      });
      const rollout = (await call<Rollout[]>('POST', '/queues/rollouts/enqueue', { rollouts: [{ input: 'wake' }] }))
        .json[0];
      const taken = await waitingDequeue;
      assert.equal(taken.json[0].rollout_id, rollout.rollout_id);
      const waiting = call<Rollout[]>('POST', '/waits/rollouts', { rollout_ids: [rollout.rollout_id], timeout: 30 });
      await call('POST', `/rollouts/${rollout.rollout_id}/attempts/${taken.json[0].attempt.attempt_id}`, {
        status: 'failed',
      });
      const done = await waiting;
      assert.equal(done.json[0].status, 'failed');
    });

    test("spans are added and queried over REST in Agent Lightning's Span shape", async () => {
      const started = (await call<AttemptedRollout>('POST', '/rollouts', { input: 'spans' })).json;
      const { rollout_id: rolloutId, attempt } = started;
      const span = (spanId: string, sequenceId: number, name: string) => ({
        rollout_id: rolloutId,
        attempt_id: attempt.attempt_id,
        sequence_id: sequenceId,
        trace_id: '6b8efff798038103d269b633813fc60c',
        span_id: spanId,
        parent_id: null,
        name,
        status: { status_code: 'OK', description: null },
        attributes: { 'gen_ai.request.model': 'm', n: 1 },
        events: [{ name: 'tick', attributes: { k: 'v' }, timestamp: 1764000001.5 }],
        links: [],
        start_time: 1764000001.25,
        end_time: 1764000002.5,
        context: { trace_id: '6b8efff798038103d269b633813fc60c', span_id: spanId, is_remote: false, trace_state: {} },
        parent: null,
        resource: { attributes: { 'service.name': 'rest-agent' }, schema_url: '' },
      });
      const first = await call<Span>('POST', '/spans', span('a1a1a1a1a1a1a1a1', 7, 'first'));
      assert.equal(first.status, 201);
      assert.equal(first.json.span_id, 'a1a1a1a1a1a1a1a1');
      const duplicate = await call('POST', '/spans', span('a1a1a1a1a1a1a1a1', 7, 'first'));
      assert.equal(duplicate.status, 201);
      assert.equal(duplicate.json, null, 'a duplicate answers null');
      assert.equal((await call('POST', '/spans', span('b2b2b2b2b2b2b2b2', 3, 'second'))).status, 201);
      assert.deepEqual(
        (await call('POST', '/spans/next', { rollout_id: rolloutId, attempt_id: attempt.attempt_id })).json,
        { sequence_id: 8 },
        'an explicit id moves the counter past it',
      );

      const unknown = await call('POST', '/spans', { ...span('c3c3c3c3c3c3c3c3', 9, 'x'), rollout_id: 'ro-nope' });
      assert.equal(unknown.status, 404);
      const badId = await call<{ detail: string }>('POST', '/spans', {
        ...span('c3c3c3c3c3c3c3c3', 9, 'x'),
        trace_id: 'XYZ',
      });
      assert.equal(badId.status, 400);
      assert.match(badId.json.detail, /trace_id must be lowercase hex of 32 digits/);

      const page = await call<PaginatedResult<Span>>('GET', `/spans?rollout_id=${rolloutId}&attempt_id=latest`);
      assert.equal(page.status, 200);
      assert.deepEqual(
        page.json.items.map((s) => [s.sequence_id, s.name]),
        [
          [3, 'second'],
          [7, 'first'],
        ],
      );
      const got = page.json.items[1];
      assert.equal(got.start_time, 1764000001.25);
      assert.deepEqual(got.status, { status_code: 'OK', description: null });
      assert.deepEqual(got.attributes, { 'gen_ai.request.model': 'm', n: 1 });
      assert.deepEqual(got.events, [{ name: 'tick', attributes: { k: 'v' }, timestamp: 1764000001.5 }]);
      assert.deepEqual(got.resource, { attributes: { 'service.name': 'rest-agent' }, schema_url: '' });
      const named = await call<PaginatedResult<Span>>('POST', '/spans/search', {
        rollout_id: rolloutId,
        name_contains: 'sec',
      });
      assert.deepEqual(
        named.json.items.map((s) => s.name),
        ['second'],
      );
      assert.equal((await call('GET', '/spans')).status, 400, 'rollout_id is required');
      // Through SQL, the same spans are rows of the spans table.
      const sql = await agl.store.query(
        `SELECT name, service_name, kind FROM spans WHERE rollout_id = '${rolloutId}' ORDER BY sequence_id`,
      );
      assert.deepEqual(sql.rows, [
        { name: 'second', service_name: 'rest-agent', kind: 'INTERNAL' },
        { name: 'first', service_name: 'rest-agent', kind: 'INTERNAL' },
      ]);
    });
  });
