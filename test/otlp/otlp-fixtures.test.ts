import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { parseJsonExact } from '../../src/api/exact-json.js';
import { FIXTURES, post, startAgl, newTempDir, removeDir, type InProcessAgl } from '../support/helpers.js';

// traces.pb and logs.pb were encoded by Google's protobuf (Python), independently of agl; the
// .expected.json files say what a correct decoder reads from them.

const KINDS = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS = ['UNSET', 'OK', 'ERROR'];

let dir: string;
let agl: InProcessAgl;
/** A second store for the same data sent as OTLP/JSON (in one store they would be duplicates). */
let aglJson: InProcessAgl;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'fixtures.duckdb'));
  aglJson = await startAgl(join(dir, 'fixtures-json.duckdb'));
});
after(async () => {
  await agl.close();
  await aglJson.close();
  await removeDir(dir);
});

/** A span of traces.expected.json; the fields toOtlpJson reads into are typed. */
interface ExpectedSpan {
  [field: string]: unknown;
  attributes: Record<string, unknown>;
  events: { time_unix_nano: string; name: string; attributes: Record<string, unknown> }[];
  links: { trace_id: string; span_id: string; trace_state: string; attributes: Record<string, unknown> }[];
}

/** A log record of logs.expected.json. */
interface ExpectedLog {
  [field: string]: unknown;
  attributes: Record<string, unknown>;
}

/** JSON text normalised so that exact big integers compare equal. */
const canon = (value: unknown) => JSON.stringify(value);

test('every span of an independently encoded ExportTraceServiceRequest is stored as decoded', async () => {
  const body = await readFile(join(FIXTURES, 'traces.pb'));
  const response = await post(`${agl.url}/v1/traces`, body, { 'content-type': 'application/x-protobuf' });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('content-type'), 'application/x-protobuf');
  assert.equal(response.body.length, 0, 'full success is an empty ExportTraceServiceResponse');

  await assertStoredAsExpected(agl);
});

test('the same spans sent as OTLP/JSON are stored exactly alike', async () => {
  const expected = parseJsonExact(await readFile(join(FIXTURES, 'traces.expected.json'), 'utf8')) as {
    spans: ExpectedSpan[];
  };
  const response = await post(`${aglJson.url}/v1/traces`, JSON.stringify(toOtlpJson(expected.spans)), {
    'content-type': 'application/json',
  });
  assert.equal(response.status, 200);
  assert.deepEqual(JSON.parse(response.body.toString()), {});
  await assertStoredAsExpected(aglJson);
});

async function assertStoredAsExpected(agl: InProcessAgl): Promise<void> {
  const expected = parseJsonExact(await readFile(join(FIXTURES, 'traces.expected.json'), 'utf8')) as {
    spans: Record<string, unknown>[];
  };
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
}

test('spans of a rollout get increasing sequence ids, one counter per rollout', async () => {
  const { rows } = await agl.store.query(
    `SELECT rollout_id, list(sequence_id ORDER BY start_time) AS seq, count(*) AS n
     FROM spans WHERE rollout_id IS NOT NULL GROUP BY rollout_id`,
  );
  assert.ok(rows.length > 0);
  for (const row of rows) {
    const seq = row.seq as number[];
    assert.deepEqual(
      [...seq].sort((a, b) => a - b),
      Array.from({ length: row.n as number }, (_, i) => i + 1),
      `rollout ${row.rollout_id}`,
    );
  }
  const unattributed = await agl.store.query(
    'SELECT count(*) AS n FROM spans WHERE rollout_id IS NULL AND sequence_id IS NOT NULL',
  );
  assert.equal(unattributed.rows[0].n, 0, 'spans without a rollout have no sequence id');
});

test('log records, GenAI events among them, are stored with their body and span link', async () => {
  const body = await readFile(join(FIXTURES, 'logs.pb'));
  const response = await post(`${agl.url}/v1/logs`, body, { 'content-type': 'application/x-protobuf' });
  assert.equal(response.status, 200);
  await assertLogsStoredAsExpected(agl);
});

test('the same log records sent as OTLP/JSON are stored alike', async () => {
  const { logs } = JSON.parse(await readFile(join(FIXTURES, 'logs.expected.json'), 'utf8')) as { logs: ExpectedLog[] };
  const request = {
    resourceLogs: [
      {
        resource: { attributes: keyValues({ 'service.name': 'svc-log1' }) },
        scopeLogs: [
          {
            scope: { name: 'genai' },
            logRecords: logs.map((log) => ({
              timeUnixNano: log.time_unix_nano,
              traceId: log.trace_id,
              spanId: log.span_id,
              eventName: log.event_name,
              severityNumber: log.severity_number,
              body: anyValue(log.body),
              attributes: keyValues(log.attributes),
            })),
          },
        ],
      },
    ],
  };
  const response = await post(`${aglJson.url}/v1/logs`, JSON.stringify(request), {
    'content-type': 'application/json',
  });
  assert.equal(response.status, 200);
  await assertLogsStoredAsExpected(aglJson);
});

async function assertLogsStoredAsExpected(agl: InProcessAgl): Promise<void> {
  const expected = JSON.parse(await readFile(join(FIXTURES, 'logs.expected.json'), 'utf8')) as {
    logs: Record<string, unknown>[];
  };
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
    assert.equal(got.service_name, 'svc-log1');
  });
}

/** OTLP/JSON for spans in the shape of traces.expected.json, grouped by resource and scope. */
function toOtlpJson(spans: ExpectedSpan[]): unknown {
  const groups = new Map<string, Map<string, ExpectedSpan[]>>();
  for (const span of spans) {
    const resourceKey = JSON.stringify(span.resource);
    const scopes = groups.get(resourceKey) ?? new Map<string, ExpectedSpan[]>();
    groups.set(resourceKey, scopes);
    const scopeKey = JSON.stringify([span.scope_name, span.scope_version]);
    scopes.set(scopeKey, [...(scopes.get(scopeKey) ?? []), span]);
  }
  return {
    resourceSpans: [...groups].map(([resourceKey, scopes]) => ({
      resource: { attributes: keyValues(parseJsonExact(resourceKey) as Record<string, unknown>) },
      scopeSpans: [...scopes].map(([scopeKey, scopeSpans]) => {
        const [name, version] = JSON.parse(scopeKey);
        return {
          scope: { name, version },
          spans: scopeSpans.map((span) => ({
            traceId: span.trace_id,
            spanId: span.span_id,
            parentSpanId: span.parent_id ?? '',
            traceState: span.trace_state,
            name: span.name,
            kind: span.kind,
            startTimeUnixNano: span.start_time_unix_nano,
            endTimeUnixNano: span.end_time_unix_nano,
            attributes: keyValues(span.attributes),
            events: span.events.map((e) => ({
              timeUnixNano: e.time_unix_nano,
              name: e.name,
              attributes: keyValues(e.attributes),
            })),
            links: span.links.map((l) => ({
              traceId: l.trace_id,
              spanId: l.span_id,
              traceState: l.trace_state,
              attributes: keyValues(l.attributes),
            })),
            status: { code: span.status_code, message: span.status_message },
          })),
        };
      }),
    })),
  };
}

function keyValues(attributes: Record<string, unknown>): unknown[] {
  return Object.entries(attributes).map(([key, value]) => ({ key, value: anyValue(value, key === 'raw') }));
}

function anyValue(value: unknown, bytes = false): unknown {
  if (bytes) return { bytesValue: value };
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (typeof value === 'number') return Number.isInteger(value) ? { intValue: String(value) } : { doubleValue: value };
  if (Array.isArray(value)) return { arrayValue: { values: value.map((v) => anyValue(v)) } };
  if (value !== null && typeof value === 'object' && 'rawJSON' in value)
    return { intValue: String((value as { rawJSON: string }).rawJSON) };
  return { kvlistValue: { values: keyValues(value as Record<string, unknown>) } };
}
