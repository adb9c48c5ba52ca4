import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { parseJsonExact } from '../src/exact-json.js';
import { FIXTURES, post, startAgl, newTempDir, removeDir, type InProcessAgl } from './helpers.js';

// traces.pb and logs.pb were encoded by Google's protobuf (Python), independently of agl; the
// .expected.json files say what a correct decoder reads from them.

const KINDS = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS = ['UNSET', 'OK', 'ERROR'];

let dir: string;
let agl: InProcessAgl;
before(async () => {
  agl = await startAgl(join((dir = await newTempDir()), 'fixtures.duckdb'));
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

/** JSON text normalised so that exact big integers compare equal. */
const canon = (value: unknown) => JSON.stringify(value);

test('every span of an independently encoded ExportTraceServiceRequest is stored as decoded', async () => {
  const body = await readFile(join(FIXTURES, 'traces.pb'));
  const response = await post(`${agl.url}/v1/traces`, body, { 'content-type': 'application/x-protobuf' });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('content-type'), 'application/x-protobuf');
  assert.equal(response.body.length, 0, 'full success is an empty ExportTraceServiceResponse');

  const expected = parseJsonExact(await readFile(join(FIXTURES, 'traces.expected.json'), 'utf8')) as { spans: Record<string, unknown>[] };
  const { rows } = await agl.store.query(
    `SELECT *, epoch_ns(start_time)::VARCHAR AS start_ns, epoch_ns(end_time)::VARCHAR AS end_ns FROM spans`,
  );
  assert.equal(rows.length, expected.spans.length);
  const bySpanId = new Map(rows.map((row) => [row.span_id, row]));
  for (const want of expected.spans) {
    const got = bySpanId.get(want.span_id);
    assert.ok(got, `span ${want.span_id} is stored`);
    const label = `span ${want.name}`;
    assert.equal(got.trace_id, want.trace_id, label);
    assert.equal(got.parent_id, want.parent_id, label);
    assert.equal(got.name, want.name, label);
    assert.equal(got.kind, KINDS[want.kind as number], label);
    assert.equal(got.start_ns, want.start_time_unix_nano, label);
    assert.equal(got.end_ns, want.end_time_unix_nano, label);
    assert.equal(got.status_code, STATUS[want.status_code as number], label);
    assert.equal(got.status_message ?? '', want.status_message, label);
    assert.equal(got.trace_state ?? '', want.trace_state ?? '', label);
    assert.equal(canon(got.attributes), canon(want.attributes), `${label} attributes`);
    assert.equal(canon(got.events), canon(want.events), `${label} events`);
    assert.equal(canon(got.links), canon(want.links), `${label} links`);
    assert.equal(canon(got.resource), canon(want.resource), `${label} resource`);
    assert.equal(got.scope_name, want.scope_name, label);
    assert.equal(got.scope_version ?? '', want.scope_version ?? '', label);
    assert.equal(got.service_name, want.service_name, label);
    assert.equal(got.rollout_id, want.rollout_id, `${label} rollout (span attribute wins over resource)`);
    assert.equal(got.attempt_id, want.attempt_id, label);
  }
});

test('spans of a rollout get increasing sequence ids, one counter per rollout', async () => {
  const { rows } = await agl.store.query(
    `SELECT rollout_id, list(sequence_id ORDER BY start_time) AS seq, count(*) AS n
     FROM spans WHERE rollout_id IS NOT NULL GROUP BY rollout_id`,
  );
  assert.ok(rows.length > 0);
  for (const row of rows) {
    const seq = row.seq as number[];
    assert.deepEqual([...seq].sort((a, b) => a - b), Array.from({ length: row.n as number }, (_, i) => i + 1), `rollout ${row.rollout_id}`);
  }
  const unattributed = await agl.store.query('SELECT count(*) AS n FROM spans WHERE rollout_id IS NULL AND sequence_id IS NOT NULL');
  assert.equal(unattributed.rows[0].n, 0, 'spans without a rollout have no sequence id');
});

test('log records, GenAI events among them, are stored with their body and span link', async () => {
  const body = await readFile(join(FIXTURES, 'logs.pb'));
  const response = await post(`${agl.url}/v1/logs`, body, { 'content-type': 'application/x-protobuf' });
  assert.equal(response.status, 200);
  const expected = JSON.parse(await readFile(join(FIXTURES, 'logs.expected.json'), 'utf8')) as { logs: Record<string, unknown>[] };
  const { rows } = await agl.store.query(`SELECT *, epoch_ns(time)::VARCHAR AS time_ns FROM logs ORDER BY time`);
  assert.equal(rows.length, expected.logs.length);
  expected.logs.forEach((want, i) => {
    const got = rows[i];
    assert.equal(got.time_ns, want.time_unix_nano);
    assert.equal(got.trace_id, want.trace_id);
    assert.equal(got.span_id, want.span_id);
    assert.equal(got.event_name, want.event_name);
    assert.equal(got.severity_number, want.severity_number);
    assert.deepEqual(got.body, want.body);
    assert.deepEqual(got.attributes, want.attributes);
  });
});
