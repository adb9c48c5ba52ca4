import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { SeverityNumber } from '@opentelemetry/api-logs';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter as OTLPJsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchLogRecordProcessor, LoggerProvider } from '@opentelemetry/sdk-logs';
import { BatchSpanProcessor, TracerProvider, type SpanExporter } from '@opentelemetry/sdk-trace';
import { newTempDir, removeDir, runCli, spawnServe } from '../support/helpers.js';

// The official OpenTelemetry JS SDK and OTLP exporters send to a real `agl serve` process;
// `agl query` (the CLI, through the server) must then find what they sent.

let url: string;
let dir: string;
let stopServer: () => Promise<void>;
before(async () => {
  dir = await newTempDir();
  const serve = await spawnServe(['--db', join(dir, 'sdk.duckdb')]);
  url = serve.url;
  stopServer = async () => {
    serve.child.kill('SIGTERM');
    await serve.exited;
  };
});
after(async () => {
  await stopServer();
  await removeDir(dir);
});

async function query(sql: string): Promise<Record<string, unknown>[]> {
  const result = await runCli(['query', sql, '--url', url, '--format', 'json']);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout) as Record<string, unknown>[];
}

/** Records a small agent-like trace (root, LLM call, tool call) through `exporter`. */
async function recordTrace(exporter: SpanExporter, service: string, rolloutId: string): Promise<void> {
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': service, 'agentlightning.rollout_id': rolloutId }),
    spanProcessors: [new BatchSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer('agl-test', '1.2.3');
  const root = tracer.startSpan('agent.run', { attributes: { 'agentlightning.attempt_id': 'at-1' } });
  const ctx = trace.setSpan(ROOT_CONTEXT, root);
  const llm = tracer.startSpan(
    'chat gpt-test',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'gen_ai.request.model': 'gpt-test',
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.response.finish_reasons': ['stop'],
        'agentlightning.attempt_id': 'at-1',
      },
    },
    ctx,
  );
  llm.addEvent('gen_ai.content.prompt', { 'gen_ai.prompt': 'What is 2+2?' });
  llm.end();
  const tool = tracer.startSpan('tool.calculator', { attributes: { 'agentlightning.attempt_id': 'at-1' } }, ctx);
  tool.setStatus({ code: SpanStatusCode.ERROR, message: 'division by zero' });
  tool.end();
  root.end();
  await provider.forceFlush();
  await provider.shutdown();
}

async function assertTraceStored(service: string, rolloutId: string): Promise<void> {
  const rows = await query(
    `SELECT name, kind, parent_id, span_id, trace_id, rollout_id, attempt_id, sequence_id, status_code, status_message,
            attributes, events, scope_name, scope_version, service_name
     FROM spans WHERE service_name = '${service}' ORDER BY name`,
  );
  assert.deepEqual(
    rows.map((r) => r.name),
    ['agent.run', 'chat gpt-test', 'tool.calculator'],
  );
  const [root, llm, tool] = rows;
  assert.equal(root.parent_id, null);
  assert.equal(llm.parent_id, root.span_id);
  assert.equal(tool.parent_id, root.span_id);
  assert.equal(new Set(rows.map((r) => r.trace_id)).size, 1);
  for (const row of rows) {
    assert.equal(row.rollout_id, rolloutId, 'attributed from the resource');
    assert.equal(row.attempt_id, 'at-1', 'attributed from the span');
    assert.equal(row.scope_name, 'agl-test');
    assert.equal(row.scope_version, '1.2.3');
  }
  assert.deepEqual(rows.map((r) => r.sequence_id).sort(), [1, 2, 3]);
  assert.equal(llm.kind, 'CLIENT');
  assert.deepEqual(llm.attributes, {
    'gen_ai.request.model': 'gpt-test',
    'gen_ai.usage.input_tokens': 12,
    'gen_ai.response.finish_reasons': ['stop'],
    'agentlightning.attempt_id': 'at-1',
  });
  const events = llm.events as { name: string; attributes: Record<string, unknown>; time_unix_nano: string }[];
  assert.equal(events.length, 1);
  assert.equal(events[0].name, 'gen_ai.content.prompt');
  assert.deepEqual(events[0].attributes, { 'gen_ai.prompt': 'What is 2+2?' });
  assert.match(events[0].time_unix_nano, /^\d{19}$/);
  assert.equal(tool.status_code, 'ERROR');
  assert.equal(tool.status_message, 'division by zero');
}

test('the OTLP protobuf exporter delivers spans, their tree and attribution', async () => {
  await recordTrace(new OTLPTraceExporter({ url: `${url}/v1/traces` }), 'svc-proto', 'ro-proto');
  await assertTraceStored('svc-proto', 'ro-proto');
});

test('the OTLP JSON exporter delivers the same', async () => {
  await recordTrace(new OTLPJsonTraceExporter({ url: `${url}/v1/traces` }), 'svc-json', 'ro-json');
  await assertTraceStored('svc-json', 'ro-json');
});

test('gzip-compressed exports are accepted', async () => {
  await recordTrace(
    new OTLPTraceExporter({ url: `${url}/v1/traces`, compression: 'gzip' as never }),
    'svc-gzip',
    'ro-gzip',
  );
  await assertTraceStored('svc-gzip', 'ro-gzip');
});

test('the OTLP logs exporter delivers log records joined to their span', async () => {
  const provider = new LoggerProvider({
    resource: resourceFromAttributes({ 'service.name': 'svc-logs', 'agentlightning.rollout_id': 'ro-logs' }),
    processors: [new BatchLogRecordProcessor({ exporter: new OTLPLogExporter({ url: `${url}/v1/logs` }) })],
  });
  const spanContext = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 };
  provider.getLogger('genai').emit({
    eventName: 'gen_ai.choice',
    severityNumber: SeverityNumber.INFO,
    body: { index: 0, message: { role: 'assistant', content: '4' } },
    attributes: { 'gen_ai.system': 'openai' },
    context: trace.setSpanContext(ROOT_CONTEXT, spanContext),
  });
  await provider.forceFlush();
  await provider.shutdown();
  const rows = await query(`SELECT * FROM logs WHERE service_name = 'svc-logs'`);
  assert.equal(rows.length, 1);
  assert.equal(rows[0].event_name, 'gen_ai.choice');
  assert.equal(rows[0].trace_id, spanContext.traceId);
  assert.equal(rows[0].span_id, spanContext.spanId);
  assert.equal(rows[0].rollout_id, 'ro-logs');
  assert.equal(rows[0].severity_number, 9);
  assert.deepEqual(rows[0].body, { index: 0, message: { role: 'assistant', content: '4' } });
  assert.deepEqual(rows[0].attributes, { 'gen_ai.system': 'openai' });
});
