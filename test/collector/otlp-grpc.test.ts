import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { connect } from 'node:http2';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Metadata, status } from '@grpc/grpc-js';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { SeverityNumber } from '@opentelemetry/api-logs';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { OTLPLogExporter as GrpcLogExporter } from '@opentelemetry/exporter-logs-otlp-grpc';
import { OTLPLogExporter as ProtoLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter as GrpcTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  InMemoryLogRecordExporter,
  LoggerProvider,
  SimpleLogRecordProcessor,
  type ReadableLogRecord,
} from '@opentelemetry/sdk-logs';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { exportOnce, healthCheck, healthWatch } from '../support/grpc-client.js';
import {
  freePort,
  newTempDir,
  queryRows,
  removeDir,
  runCli,
  spawnServe,
  startAgl,
  tempDir,
  type InProcessAgl,
} from '../support/helpers.js';
import { makeBatch } from '../support/otlp-batches.js';

// The official OpenTelemetry JS gRPC exporters against agl's OTLP/gRPC receiver: what they send
// must land exactly as the same data sent over OTLP/HTTP by the protobuf exporters.

let dir: string;
/** Receives over OTLP/HTTP only. */
let overHttp: InProcessAgl;
/** Receives over OTLP/gRPC (and HTTP). */
let overGrpc: InProcessAgl;
let grpcUrl: string;
before(async () => {
  dir = await newTempDir();
  overHttp = await startAgl(join(dir, 'http.duckdb'));
  overGrpc = await startAgl(join(dir, 'grpc.duckdb'), { grpcPort: 0 });
  grpcUrl = `http://${overGrpc.server.grpcAddress}`;
});
after(async () => {
  await overHttp.close();
  await overGrpc.close();
  await removeDir(dir);
});

/** An agent's trace: a root, an LLM call (flattened GenAI attributes), a failed tool call; recorded, not sent. */
async function recordSpans(rolloutId: string): Promise<ReadableSpan[]> {
  const memory = new InMemorySpanExporter();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'svc-parity', 'agentlightning.rollout_id': rolloutId }),
    spanProcessors: [new SimpleSpanProcessor({ exporter: memory })],
  });
  const tracer = provider.getTracer('agl-test', '1.2.3');
  const root = tracer.startSpan('agent.run', { attributes: { 'agentlightning.attempt_id': 'at-1' } });
  const ctx = trace.setSpan(ROOT_CONTEXT, root);
  const llm = tracer.startSpan(
    'chat gpt-test',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'gen_ai.system': 'openai',
        'gen_ai.request.model': 'gpt-test',
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.usage.output_tokens': 3,
        'gen_ai.prompt.0.role': 'user',
        'gen_ai.prompt.0.content': 'What is 2+2? ✓',
        'gen_ai.completion.0.role': 'assistant',
        'gen_ai.completion.0.content': '4',
        'gen_ai.response.finish_reasons': ['stop'],
        temperature: 0.25,
        streamed: false,
      },
    },
    ctx,
  );
  llm.addEvent('gen_ai.content.prompt', { 'gen_ai.prompt': 'What is 2+2?' });
  llm.addLink({ context: root.spanContext(), attributes: { why: 'caused by' } });
  llm.end();
  const tool = tracer.startSpan('tool.calculator', { attributes: { 'agentlightning.attempt_id': 'at-1' } }, ctx);
  tool.setStatus({ code: SpanStatusCode.ERROR, message: 'division by zero' });
  tool.end();
  root.end();
  // Not shut down: that would empty the in-memory exporter.
  await provider.forceFlush();
  return memory.getFinishedSpans();
}

/** GenAI events of a call made by another instrumentation (llm_calls reads them), and a plain log line. */
async function recordLogs(rolloutId: string, call: ReadableSpan): Promise<ReadableLogRecord[]> {
  const memory = new InMemoryLogRecordExporter();
  const provider = new LoggerProvider({
    resource: resourceFromAttributes({ 'service.name': 'svc-parity', 'agentlightning.rollout_id': rolloutId }),
    processors: [new SimpleLogRecordProcessor({ exporter: memory })],
  });
  const context = trace.setSpanContext(ROOT_CONTEXT, call.spanContext());
  const logger = provider.getLogger('genai', '0.1.0');
  logger.emit({ eventName: 'gen_ai.user.message', body: { content: 'Hello?' }, context });
  logger.emit({
    eventName: 'gen_ai.choice',
    severityNumber: SeverityNumber.INFO,
    body: { index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'Hi.' } },
    attributes: { 'gen_ai.system': 'openai' },
    context,
  });
  logger.emit({ severityText: 'WARN', body: 'a plain line', attributes: { n: 7 } });
  await provider.forceFlush();
  return memory.getFinishedLogRecords();
}

interface Exporter<T> {
  export(items: T[], done: (result: ExportResult) => void): void;
  shutdown(): Promise<void>;
}

/** Exports `items` once through `exporter`, then shuts it down; the export's result. */
async function exportWith<T>(exporter: Exporter<T>, items: T[]): Promise<ExportResult> {
  const result = await new Promise<ExportResult>((resolve) => exporter.export(items, resolve));
  await exporter.shutdown();
  return result;
}

const rowsOf = (agl: InProcessAgl, sql: string) => queryRows(agl.store, sql);

test('the gRPC exporters store spans, logs and llm_calls exactly as the HTTP exporters do', async () => {
  const spans = await recordSpans('ro-parity');
  const logs = await recordLogs('ro-parity', spans.find((s) => s.name === 'chat gpt-test') as ReadableSpan);

  const http = { url: overHttp.url };
  assert.equal((await exportWith(new ProtoTraceExporter({ url: `${http.url}/v1/traces` }), spans)).code, 0);
  assert.equal((await exportWith(new ProtoLogExporter({ url: `${http.url}/v1/logs` }), logs)).code, 0);
  const grpcSpans = await exportWith(new GrpcTraceExporter({ url: grpcUrl }), spans);
  assert.equal(grpcSpans.code, ExportResultCode.SUCCESS, String(grpcSpans.error));
  const grpcLogs = await exportWith(new GrpcLogExporter({ url: grpcUrl }) as Exporter<ReadableLogRecord>, logs);
  assert.equal(grpcLogs.code, ExportResultCode.SUCCESS, String(grpcLogs.error));

  for (const sql of [
    'SELECT * FROM spans ORDER BY span_id',
    'SELECT * FROM logs ORDER BY time, event_name',
    'SELECT * FROM llm_calls ORDER BY span_id, name',
  ]) {
    const viaHttp = await rowsOf(overHttp, sql);
    assert.deepEqual(await rowsOf(overGrpc, sql), viaHttp, sql);
  }
  assert.equal((await rowsOf(overGrpc, 'SELECT * FROM spans')).length, 3);
  assert.equal((await rowsOf(overGrpc, 'SELECT * FROM logs')).length, 3);
  const calls = await rowsOf(overGrpc, 'SELECT model, input_tokens, output_messages FROM llm_calls');
  assert.equal(calls.length, 1, 'one call: the GenAI events and attributes describe the same span');
  assert.equal(calls[0].model, 'gpt-test');
});

test('gzip-compressed gRPC exports are accepted', async () => {
  const spans = await recordSpans('ro-gzip');
  const result = await exportWith(new GrpcTraceExporter({ url: grpcUrl, compression: 'gzip' as never }), spans);
  assert.equal(result.code, ExportResultCode.SUCCESS, String(result.error));
  const rows = await rowsOf(overGrpc, "SELECT name FROM spans WHERE rollout_id = 'ro-gzip' ORDER BY name");
  assert.deepEqual(
    rows.map((r) => r.name),
    ['agent.run', 'chat gpt-test', 'tool.calculator'],
  );
});

test('the health service answers SERVING, and NOT_FOUND for a service agl does not serve', async () => {
  const address = overGrpc.server.grpcAddress as string;
  assert.deepEqual(await healthCheck(address), { status: 1 });
  assert.deepEqual(await healthCheck(address, 'opentelemetry.proto.collector.trace.v1.TraceService'), { status: 1 });
  const unknown = await healthCheck(address, 'opentelemetry.proto.collector.metrics.v1.MetricsService');
  assert.equal(unknown.error?.code, status.NOT_FOUND);
});

test('a health Watch hears SERVING, then NOT_SERVING as the server stops, which does not wait for it', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'watch.duckdb'), { grpcPort: 0 });
  const statuses: number[] = [];
  let serving: () => void = () => {};
  const servingSeen = new Promise<void>((resolve) => (serving = resolve));
  const ended = healthWatch(agl.server.grpcAddress as string, (status) => {
    statuses.push(status);
    if (status === 1) serving();
  });
  await servingSeen;
  await agl.close();
  await ended;
  assert.deepEqual(statuses, [1, 2]);
});

test('with --token, gRPC exports need the bearer token as metadata; health needs none', async (t) => {
  const db = join(await tempDir(t), 'token.duckdb');
  const port = await freePort();
  const serve = await spawnServe(['--db', db, '--token', 's3cret', '--grpc-port', String(port)]);
  t.after(async () => {
    serve.child.kill('SIGTERM');
    await serve.exited;
  });
  assert.equal(serve.grpcAddress, `127.0.0.1:${port}`);
  const url = `http://${serve.grpcAddress}`;
  const spans = await recordSpans('ro-token');
  const anonymous = await exportWith(new GrpcTraceExporter({ url }), spans);
  assert.equal(anonymous.code, ExportResultCode.FAILED);
  assert.equal((anonymous.error as { code?: number }).code, status.UNAUTHENTICATED);
  assert.match(String(anonymous.error), /needs the metadata authorization: Bearer <token>/);
  const wrong = new Metadata();
  wrong.set('authorization', 'Bearer s3cre');
  assert.equal(
    (await exportWith(new GrpcTraceExporter({ url, metadata: wrong }), spans)).code,
    ExportResultCode.FAILED,
  );
  const right = new Metadata();
  right.set('authorization', 'Bearer s3cret');
  const ok = await exportWith(new GrpcTraceExporter({ url, metadata: right }), spans);
  assert.equal(ok.code, ExportResultCode.SUCCESS, String(ok.error));
  assert.deepEqual(await healthCheck(serve.grpcAddress as string), { status: 1 });
  const count = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db, '--token', 's3cret']);
  assert.match(count.stdout, /\b3\b/);
});

test("each connection's HTTP/2 flow-control windows are raised, so that a large export is not paced by the server", async () => {
  const session = connect(`http://${overGrpc.server.grpcAddress}`);
  try {
    const raised = new Promise<void>((resolve) =>
      session.on('remoteSettings', (settings) => {
        if (settings.initialWindowSize === 16 * 2 ** 20) resolve();
      }),
    );
    // Any call opens a stream, and the first stream of a connection raises its windows.
    const stream = session.request({
      ':method': 'POST',
      ':path': '/grpc.health.v1.Health/Check',
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    stream.resume();
    stream.end(Buffer.from([0, 0, 0, 0, 0]));
    await raised;
    await new Promise((resolve) => stream.once('close', resolve));
  } finally {
    session.close();
  }
});

test('on a loopback address, a call naming another host is refused, as over HTTP', async () => {
  const { body } = await makeBatch(1);
  const outcome = await exportOnce(overGrpc.server.grpcAddress as string, 'traces', body, {
    channel: { 'grpc.default_authority': 'attacker.example:4317' },
  });
  assert.equal(outcome.error?.code, status.PERMISSION_DENIED);
  assert.match(outcome.error?.details ?? '', /answers only to loopback names, not to "attacker\.example:4317"/);
});

test('agl serve reports its gRPC port, says which flag to change when it is taken, and --grpc-port 0 turns it off', async (t) => {
  const dir = await tempDir(t);
  const port = await freePort();
  const first = await spawnServe(['--db', join(dir, 'first.duckdb'), '--grpc-port', String(port)]);
  t.after(async () => {
    first.child.kill('SIGTERM');
    await first.exited;
  });
  assert.match(
    first.output(),
    new RegExp(`serving on http://127\\.0\\.0\\.1:\\d+, OTLP/gRPC on 127\\.0\\.0\\.1:${port}, storing`),
  );
  const taken = await runCli(['serve', '--db', join(dir, 'second.duckdb'), '--port', '0', '--grpc-port', String(port)]);
  assert.equal(taken.code, 1);
  assert.match(taken.stderr, new RegExp(`127\\.0\\.0\\.1:${port} is already in use: .* another --grpc-port`));
  assert.ok(!existsSync(join(dir, 'second.duckdb')), 'the port fails before the database file is created');
  const off = await spawnServe(['--db', join(dir, 'third.duckdb'), '--grpc-port', '0']);
  off.child.kill('SIGTERM');
  await off.exited;
  assert.equal(off.grpcAddress, undefined);
  assert.match(off.output(), /serving on http:\/\/127\.0\.0\.1:\d+, storing/);
  const bad = await runCli(['serve', '--grpc-port', 'grpc']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--grpc-port must be an integer from 0 to 65535, not "grpc"/);
});
