import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir, rename } from 'node:fs/promises';
import { DuckDBInstance } from '@duckdb/node-api';
import { join } from 'node:path';
import { test } from 'node:test';
import { readFile } from 'node:fs/promises';
import { spanRows } from '../../src/store/span-json.js';
import { derivedRowsOf } from '../../src/sql/derived.js';
import { compactSpansDir } from '../../src/store/span-files.js';
import { call, otlpJsonRequest, reward, span } from '../support/span-fixtures.js';
import {
  post,
  queryRows,
  runCli,
  spawnServe,
  startAgl,
  tempDir,
  type InProcessAgl,
  LLM_CALLS_SEARCH_PATH,
} from '../support/helpers.js';

// Servers sharing one span directory (docs/scale-out.md, "Spans in a shared directory").

/** One OTLP/JSON request of `count` spans of one trace; answers the body and the span keys. */
function spansBody(count: number): { body: string; keys: string[] } {
  const traceId = randomBytes(16).toString('hex');
  const spanIds = Array.from({ length: count }, () => randomBytes(8).toString('hex'));
  const now = BigInt(Date.now()) * 1_000_000n;
  const body = JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'agent' } }] },
        scopeSpans: [
          {
            spans: spanIds.map((spanId, i) => ({
              traceId,
              spanId,
              name: `step-${i}`,
              startTimeUnixNano: String(now + BigInt(i)),
              endTimeUnixNano: String(now + 1000n + BigInt(i)),
              attributes: [{ key: 'step', value: { intValue: String(i) } }],
            })),
          },
        ],
      },
    ],
  });
  return { body, keys: spanIds.map((spanId) => `${traceId}/${spanId}`) };
}

/** Sends spans to each server given; answers the keys sent. */
async function send(urls: string[], requests: number, spansEach: number): Promise<string[]> {
  const keys: string[] = [];
  for (let i = 0; i < requests; i++) {
    const url = urls[i % urls.length];
    const { body, keys: sent } = spansBody(spansEach);
    const answer = await post(`${url}/v1/traces`, body, { 'content-type': 'application/json' });
    assert.equal(answer.status, 200);
    keys.push(...sent);
  }
  return keys;
}

/** The span keys `spans` holds through the server's SQL endpoint (every server's), duplicates kept. */
async function keysVia(url: string): Promise<string[]> {
  const answer = await post(
    `${url}/v1/agl/query`,
    JSON.stringify({ sql: "SELECT trace_id || '/' || span_id AS k FROM spans" }),
    { 'content-type': 'application/json' },
  );
  assert.equal(answer.status, 200, answer.body.toString());
  return (JSON.parse(answer.body.toString()) as { rows: { k: string }[] }).rows.map((row) => row.k);
}

const sorted = (keys: string[]) => [...keys].sort();

const healthOf = async (url: string) =>
  (await (await fetch(`${url}/v1/agl/health`)).json()) as {
    spanMove: { serverId: string; rows: number; seconds: number };
  };

/** Two servers on one span directory that move only when told (moveSpans, close). */
async function twoServers(t: { after(fn: () => Promise<void>): void }, dir: string, spansDir: string) {
  const servers: InProcessAgl[] = [];
  for (const name of ['a', 'b'])
    servers.push(
      await startAgl(join(dir, `${name}.duckdb`), {
        spansDir,
        serverId: name,
        spansMoveEveryMs: Number.POSITIVE_INFINITY,
        deriveWhenIdleMs: Number.POSITIVE_INFINITY,
      }),
    );
  t.after(async () => {
    for (const server of servers) await server.close().catch(() => {});
  });
  return servers;
}

test('two servers on one span directory: every span is read on either, exactly once', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const [a, b] = await twoServers(t, dir, spansDir);
  const before = await send([a.url, b.url], 6, 5);
  // Before any move each server reads its own spans (and the other's moved ones: none).
  assert.equal((await keysVia(a.url)).length, 15);
  assert.equal((await healthOf(a.url)).spanMove.rows, 15);
  assert.equal(await a.store.moveSpans(), 15);
  assert.equal(await b.store.moveSpans(), 15);
  const after = await send([a.url, b.url], 4, 5); // local on each, not moved yet
  const all = sorted([...before, ...after]);
  assert.deepEqual(sorted(await keysVia(a.url)), sorted([...before, ...after.filter((_, i) => i % 10 < 5)]));
  await a.store.moveSpans();
  await b.store.moveSpans();
  assert.deepEqual(sorted(await keysVia(a.url)), all);
  assert.deepEqual(sorted(await keysVia(b.url)), all);
  // Moved spans leave the server's file; `main.spans` is the file's own table.
  assert.deepEqual(await queryRows(a.store, 'SELECT count(*)::INTEGER AS n FROM main.spans'), [{ n: 0 }]);
  // The health report says the move caught up; the CLI reads the union through the server too.
  assert.deepEqual((await healthOf(a.url)).spanMove, { serverId: 'a', rows: 0, seconds: 0 });
  const sql = 'SELECT server, count(*)::INTEGER AS n FROM spans GROUP BY server ORDER BY server';
  const cli = await runCli(['query', sql, '--url', b.url, '--format', 'json']);
  assert.equal(cli.code, 0, cli.stderr);
  assert.deepEqual(JSON.parse(cli.stdout), [
    { server: 'a', n: 25 },
    { server: 'b', n: 25 },
  ]);
  // Its file, read with the server stopped, reads the directory as the server did.
  await a.close();
  const offline = await runCli(['query', sql, '--db', join(dir, 'a.duckdb'), '--format', 'json']);
  assert.equal(offline.code, 0, offline.stderr);
  assert.equal(offline.stdout, cli.stdout);
});

test('an export over the span directory equals that of one server that saw all the spans', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const [a, b] = await twoServers(t, dir, spansDir);
  const single = await startAgl(join(dir, 'single.duckdb'), { deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  t.after(() => single.close());
  for (let i = 0; i < 8; i++) {
    const { body } = spansBody(3);
    for (const url of [i % 2 === 0 ? a.url : b.url, single.url])
      assert.equal((await post(`${url}/v1/traces`, body, { 'content-type': 'application/json' })).status, 200);
  }
  await a.store.moveSpans();
  const columns = 'trace_id, span_id, parent_id, name, kind, start_time, end_time, attributes, resource, events, links';
  const order = 'ORDER BY trace_id, span_id';
  const fleet = join(dir, 'fleet.parquet');
  const one = join(dir, 'one.parquet');
  await b.store.exportQuery(`SELECT ${columns} FROM spans ${order}`, fleet, 'parquet');
  await single.store.exportQuery(`SELECT ${columns} FROM spans ${order}`, one, 'parquet');
  const read = (path: string) => queryRows(single.store, `SELECT * FROM read_parquet('${path}')`);
  const [fleetRows, oneRows] = [await read(fleet), await read(one)];
  assert.equal(oneRows.length, 24);
  assert.deepEqual(fleetRows, oneRows);
});

/** `agl export KIND` from `source` into DIR/NAME-KIND.jsonl; answers the file's text. */
async function exportText(dir: string, name: string, kind: string, source: string[]): Promise<string> {
  const out = join(dir, `${name}-${kind}.jsonl`);
  const cli = await runCli(['export', kind, ...source, '--out', out]);
  assert.equal(cli.code, 0, cli.stderr);
  return readFile(out, 'utf8');
}

test("a call through the gateway is the gateway's row through the directory's derived-only views too", async (t) => {
  const dir = await tempDir(t);
  const [a, b] = await twoServers(t, dir, join(dir, 'spans'));
  // The agent's capture moved by server a, the gateway's child of it derived on server b and not
  // moved: the capture's row leaves llm_calls for a key of b's file.
  const ids = { rollout_id: 'ro-g', attempt_id: 'at-g', trace: 300 };
  const capture = call('qg', 'ag', 1, ids);
  const gateway = call('qg', 'ag', 1.5, { ...ids, parent_id: capture.span_id, responseId: 'resp-gateway' });
  gateway.attributes = { ...gateway.attributes, 'agl.gateway': 'true' };
  await a.store.writeSpans(spanRows(capture), 0);
  await a.store.moveSpans();
  await b.store.writeSpans(spanRows(gateway), 0);
  await b.store.deriveAll();
  // Every call is agl's own: b plans llm_calls without the other dialects' calls.
  const [{ path }] = await queryRows(b.store, LLM_CALLS_SEARCH_PATH);
  assert.equal(path, 'fleet_own_calls_only,fleet_derived_only,no_log_events,fleet,main');
  const callsOf = (view: string) => `SELECT span_id, response_id FROM ${view} WHERE rollout_id = 'ro-g'`;
  const calls = await queryRows(b.store, callsOf('llm_calls'));
  assert.deepEqual(calls, [{ span_id: gateway.span_id, response_id: 'resp-gateway' }]);
  assert.deepEqual(calls, await queryRows(b.store, callsOf('fleet.llm_calls')));
});

test('exports and views through a server, or over the directory, equal those of one server that stored every span', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const [a, b] = await twoServers(t, dir, spansDir);
  const singlePath = join(dir, 'single.duckdb');
  const single = await startAgl(singlePath, { deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  // Eight rollouts of two calls and a reward each, every rollout on one of the two servers; the
  // first six are moved, the last two wait on server a.
  const store = async (r: number, server: InProcessAgl) => {
    const ids = { rollout_id: `ro-${r}`, attempt_id: `at-${r}`, trace: 100 + r };
    const spans = [
      call(`q${r}`, `a${r}`, 10 * r, ids),
      call(`q${r}b`, `a${r}b`, 10 * r + 2, ids),
      reward(r / 10, 10 * r + 5, ids),
    ];
    await server.store.writeSpans(spanRows(...spans), 0);
    await single.store.writeSpans(spanRows(...spans), 0);
  };
  for (let r = 0; r < 6; r++) await store(r, r % 2 === 0 ? a : b);
  await a.store.moveSpans();
  await b.store.moveSpans();
  for (let r = 6; r < 8; r++) await store(r, a);
  await single.close();
  // Server b stores no span it has not derived: its reads look names up in the directory's
  // derived-only views first, which give a rollout's calls as the fleet's own view does.
  const [{ path }] = await queryRows(b.store, LLM_CALLS_SEARCH_PATH);
  assert.equal(path, 'fleet_own_calls_only,fleet_derived_only,no_log_events,fleet,main');
  const callsOf = (view: string) =>
    `SELECT span_id, model, output_messages, input_tokens FROM ${view} WHERE rollout_id = 'ro-2' ORDER BY span_id`;
  const fast = await queryRows(b.store, callsOf('llm_calls'));
  assert.equal(fast.length, 2);
  assert.deepEqual(fast, await queryRows(b.store, callsOf('fleet.llm_calls')));
  // Server a has spans waiting for its deriver: llm_calls over the read's own table of their
  // calls, over the fleet's views.
  assert.deepEqual(await queryRows(a.store, LLM_CALLS_SEARCH_PATH), [
    { path: 'fresh_calls_table,no_log_events,fleet,main' },
  ]);
  // The REST API lists a rollout's spans wherever they are: moved, on another server, or local.
  for (const [server, rollout] of [
    [a, 'ro-0'],
    [a, 'ro-1'],
    [a, 'ro-7'],
    [b, 'ro-0'],
  ] as const) {
    const listed = await server.store.lightning.querySpans({ rollout_id: rollout });
    assert.deepEqual(
      listed.items.map((span) => span.sequence_id),
      [1, 2, 3],
      rollout,
    );
    // The dashboard's reads of one rollout (derivedRowsOf) too.
    const rows = derivedRowsOf({ rolloutIds: [rollout] });
    const [{ calls, rewards }] = await queryRows(
      server.store,
      `SELECT (SELECT count(*)::INTEGER FROM (${rows.calls})) AS calls, (SELECT count(*)::INTEGER FROM (${rows.rewards})) AS rewards`,
    );
    assert.deepEqual({ calls, rewards }, { calls: 2, rewards: 1 }, rollout);
  }
  for (const kind of ['triplets', 'messages', 'trajectories']) {
    const one = await exportText(dir, 'one', kind, ['--db', singlePath]);
    assert.ok(one.split('\n').length > 8, kind);
    // Server a reads the directory and its own rows not moved yet: all eight rollouts.
    assert.equal(await exportText(dir, 'a', kind, ['--url', a.url]), one, kind);
    // Server b and the directory alone read the six that moved.
    const moved = await exportText(dir, 'b', kind, ['--url', b.url]);
    assert.equal(await exportText(dir, 'dir', kind, ['--spans-dir', spansDir]), moved, kind);
    assert.ok(moved.length < one.length, kind);
  }
  // So do the views.
  const sql = `SELECT c.rollout_id, c.model, c.output_messages, r.value AS reward
    FROM llm_calls c LEFT JOIN rewards r USING (rollout_id) ORDER BY c.rollout_id, c.start_time`;
  const query = async (source: string[]) => {
    const cli = await runCli(['query', sql, ...source, '--format', 'json']);
    assert.equal(cli.code, 0, cli.stderr);
    return JSON.parse(cli.stdout) as unknown[];
  };
  const oneViews = await query(['--db', singlePath]);
  assert.equal(oneViews.length, 16);
  assert.deepEqual(await query(['--url', a.url]), oneViews);
  assert.deepEqual(await query(['--spans-dir', spansDir]), oneViews.slice(0, 12));
});

test('a move cut off before its rename, or after it, neither loses nor duplicates, then or after a restart', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const path = join(dir, 'a.duckdb');
  const options = { spansDir, serverId: 'a', spansMoveEveryMs: Number.POSITIVE_INFINITY };
  const agl = await startAgl(path, options);
  const keys = await send([agl.url], 4, 5);
  const localRows = async (store: InProcessAgl['store']) =>
    (await queryRows(store, 'SELECT count(*)::INTEGER AS n FROM main.spans'))[0].n;
  // A process dies after writing the temporary file, before the rename that commits the move.
  await assert.rejects(agl.store.moveSpans({ afterCopy: () => Promise.reject(new Error('killed')) }), /killed/);
  assert.equal((await tempFiles(spansDir)).length, 1);
  assert.deepEqual(sorted(await keysVia(agl.url)), sorted(keys));
  // Now a move cut off right after its rename, before its delete: the rows are both in the file
  // and still in the local table, and are read once.
  await assert.rejects(agl.store.moveSpans({ afterRename: () => Promise.reject(new Error('killed')) }), /killed/);
  assert.equal(await localRows(agl.store), 20);
  assert.deepEqual(sorted(await keysVia(agl.url)), sorted(keys));
  await agl.server.close();
  await agl.store.close();
  // On start the leftover temporary file goes, the moved rows leave the file, and what was
  // moved is not moved again; new spans are numbered after the moved ones.
  const again = await startAgl(path, options);
  t.after(() => again.close());
  assert.deepEqual(await tempFiles(spansDir), []);
  assert.equal(await localRows(again.store), 0);
  assert.equal(await again.store.moveSpans(), 0);
  const more = await send([again.url], 1, 5);
  assert.deepEqual(await queryRows(again.store, 'SELECT min(commit_seq) AS lo FROM main.spans'), [{ lo: 20 }]);
  assert.equal(await again.store.moveSpans(), 5);
  assert.deepEqual(sorted(await keysVia(again.url)), sorted([...keys, ...more]));
});

test('compaction merges the files of a partition and keeps the row set', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const [a, b] = await twoServers(t, dir, spansDir);
  for (let round = 0; round < 3; round++) {
    await send([a.url, b.url], 2, 4);
    await a.store.moveSpans();
    await b.store.moveSpans();
  }
  const before = sorted(await keysVia(a.url));
  assert.equal(before.length, 24);
  assert.ok((await partFiles(spansDir)).length >= 6);
  const cli = await runCli(['compact', '--spans-dir', spansDir]);
  assert.equal(cli.code, 0, cli.stderr);
  const files = await partFiles(spansDir);
  // One file per server (all moves of this test fall in one or two hours).
  assert.ok(files.length <= 4, files.join(', '));
  assert.deepEqual(sorted(await keysVia(a.url)), before);
  assert.deepEqual(sorted(await keysVia(b.url)), before);
  // A move after compaction goes on from the merged file's range.
  const more = await send([a.url], 1, 2);
  assert.equal(await a.store.moveSpans(), 2);
  assert.deepEqual(sorted(await keysVia(b.url)), sorted([...before, ...more]));
  // A second compaction merges the new file into its partition's.
  assert.ok((await compactSpansDir(spansDir)) >= 2);
  assert.deepEqual(sorted(await keysVia(a.url)), sorted([...before, ...more]));
});

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true });
  return entries.map(String);
}
const tempFiles = async (dir: string) => (await filesUnder(dir)).filter((file) => file.endsWith('.tmp'));
const partFiles = async (dir: string) => (await filesUnder(dir)).filter((file) => /part-\d+-\d+\.parquet$/.test(file));

test('agl serve killed (SIGKILL) while it moves spans loses and duplicates none after its restart', async (t) => {
  const dir = await tempDir(t);
  const spansDir = join(dir, 'spans');
  const db = join(dir, 'a.duckdb');
  const args = ['--db', db, '--spans-dir', spansDir, '--server-id', 'a', '--quiet'];
  const first = await spawnServe([...args, '--spans-move-every', '0.02']);
  // Acknowledged spans are committed; moves run every 20 ms meanwhile, so the kill lands
  // between, or inside, one of them.
  const acknowledged = await send([first.url], 30, 20);
  first.child.kill('SIGKILL');
  await first.exited;
  const again = await spawnServe(args);
  t.after(async () => {
    again.child.kill('SIGTERM');
    await again.exited;
  });
  assert.deepEqual(sorted(await keysVia(again.url)), sorted(acknowledged));
  assert.deepEqual(await tempFiles(spansDir), []);
});

test('agl query and export --spans-dir name a directory that holds no span files', async (t) => {
  const dir = await tempDir(t);
  for (const args of [
    ['query', 'SELECT 1', '--spans-dir', dir],
    ['export', 'messages', '--spans-dir', dir, '--out', join(dir, 'out.jsonl')],
  ]) {
    const cli = await runCli(args);
    assert.equal(cli.code, 2, cli.stderr);
    assert.match(cli.stderr, /no span files in .*: it is the --spans-dir of no agl serve yet/);
  }
});

test('log records move too: an LLM call told in GenAI log events reads the same through either server', async (t) => {
  const dir = await tempDir(t);
  const [a, b] = await twoServers(t, dir, join(dir, 'spans'));
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  const now = String(BigInt(Date.now()) * 1_000_000n);
  const text = (value: string) => ({ stringValue: value });
  const span = otlpJsonRequest([{ traceId, spanId, name: 'chat gpt-events', start: BigInt(now) }]).replace(
    '"name":"chat gpt-events"',
    `"name":"chat gpt-events","attributes":[{"key":"gen_ai.system","value":{"stringValue":"openai"}},{"key":"gen_ai.request.model","value":{"stringValue":"gpt-events"}}]`,
  );
  const event = (eventName: string, body: object) => ({ timeUnixNano: now, eventName, traceId, spanId, body });
  const logs = JSON.stringify({
    resourceLogs: [
      {
        resource: { attributes: [] },
        scopeLogs: [
          {
            logRecords: [
              event('gen_ai.user.message', { kvlistValue: { values: [{ key: 'content', value: text('q') }] } }),
              event('gen_ai.choice', {
                kvlistValue: {
                  values: [
                    { key: 'index', value: { intValue: '0' } },
                    { key: 'finish_reason', value: text('stop') },
                    { key: 'message', value: { kvlistValue: { values: [{ key: 'content', value: text('a') }] } } },
                  ],
                },
              }),
            ],
          },
        ],
      },
    ],
  });
  const json = { 'content-type': 'application/json' };
  assert.equal((await post(`${a.url}/v1/traces`, span, json)).status, 200);
  assert.equal((await post(`${a.url}/v1/logs`, logs, json)).status, 200);
  const sql = `SELECT model, input_messages, output_messages, finish_reason FROM llm_calls WHERE model = 'gpt-events'`;
  const before = await queryRows(a.store, sql);
  assert.deepEqual(before, [
    {
      model: 'gpt-events',
      input_messages: [{ role: 'user', content: 'q' }],
      output_messages: [{ role: 'assistant', content: 'a' }],
      finish_reason: 'stop',
    },
  ]);
  // Until a moves them, b sees no GenAI log event: its reads plan without them. Once a file holds
  // some, b's next read reads that new file and plans with them (each file is read once).
  const path = LLM_CALLS_SEARCH_PATH;
  assert.deepEqual(await queryRows(b.store, path), [
    { path: 'fleet_own_calls_only,fleet_derived_only,no_log_events,fleet,main' },
  ]);
  await a.store.moveSpans();
  assert.deepEqual(await queryRows(a.store, 'SELECT count(*)::INTEGER AS n FROM main.logs'), [{ n: 0 }]);
  assert.deepEqual(await queryRows(b.store, 'SELECT server, count(*)::INTEGER AS n FROM logs GROUP BY server'), [
    { server: 'a', n: 2 },
  ]);
  assert.deepEqual(await queryRows(b.store, sql), before);
  assert.deepEqual(await queryRows(a.store, sql), before);
  // Server b stores no log record: a's file says it holds GenAI log events (genai_event).
  assert.deepEqual(await queryRows(b.store, path), [{ path: 'fleet_derived_only,fleet,main' }]);
  // The log files as an older agl wrote them, with no genai_event: their records are tested one by one.
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  for (const file of (await readdir(dir, { recursive: true })).filter((name) => /logs-[^/]*\.parquet$/.test(name))) {
    const at = join(dir, file);
    await connection.run(`COPY (SELECT * EXCLUDE (genai_event) FROM read_parquet('${at}', hive_partitioning = false))
      TO '${at}.older' (FORMAT parquet)`);
    await rename(`${at}.older`, at);
  }
  connection.closeSync();
  instance.closeSync();
  assert.deepEqual(await queryRows(b.store, path), [{ path: 'fleet_derived_only,fleet,main' }]);
  assert.deepEqual(await queryRows(b.store, sql), before);
});

test("a call of another dialect that one server moved ends the other's plan of agl's own calls alone", async (t) => {
  const dir = await tempDir(t);
  const [a, b] = await twoServers(t, dir, join(dir, 'spans'));
  await b.store.writeSpans(spanRows(call('qo', 'ao', 1, { rollout_id: 'ro-own' })), 0);
  await b.store.deriveAll();
  // An OpenLLMetry call (flattened gen_ai.prompt attributes, dialect 3) on server a.
  const flat = span({
    name: 'openai.chat',
    start: 2,
    end: 3,
    rollout_id: 'ro-flat',
    attributes: {
      'gen_ai.system': 'openai',
      'gen_ai.request.model': 'gpt-flat',
      'gen_ai.prompt.0.role': 'user',
      'gen_ai.prompt.0.content': 'q',
      'gen_ai.completion.0.role': 'assistant',
      'gen_ai.completion.0.content': 'a',
    },
  });
  await a.store.writeSpans(spanRows(flat), 0);
  await a.store.deriveAll();
  const path = LLM_CALLS_SEARCH_PATH;
  const flatCalls = "SELECT model, output_messages FROM llm_calls WHERE rollout_id = 'ro-flat'";
  const expected = [{ model: 'gpt-flat', output_messages: [{ role: 'assistant', content: 'a' }] }];
  // a stores it: a plans the other dialects. b, until a moves it, plans agl's own calls alone.
  assert.deepEqual(await queryRows(a.store, path), [{ path: 'fleet_derived_only,no_log_events,fleet,main' }]);
  assert.deepEqual(await queryRows(a.store, flatCalls), expected);
  assert.deepEqual(await queryRows(b.store, path), [
    { path: 'fleet_own_calls_only,fleet_derived_only,no_log_events,fleet,main' },
  ]);
  await a.store.moveSpans();
  assert.deepEqual(await queryRows(b.store, path), [{ path: 'fleet_derived_only,no_log_events,fleet,main' }]);
  assert.deepEqual(await queryRows(b.store, flatCalls), expected);
  assert.deepEqual(await queryRows(b.store, "SELECT input_messages FROM llm_calls WHERE rollout_id = 'ro-own'"), [
    { input_messages: [{ role: 'user', content: 'qo' }] },
  ]);
});
