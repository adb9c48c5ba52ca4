import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { GENAI } from '../../src/api/semconv.js';
import { json, newTempDir, queryRows, removeDir, runCli, startAgl, type InProcessAgl } from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// An evaluator's verdict on a call (gen_ai.evaluation.result, a span event or a log record) is a
// reward of that call, so an existing evaluator's output trains agents with no glue; and the
// official OpenAI instrumentation's newest form, unchanged, gives llm_calls rows.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;
let tracers: TracerProvider;
let loggers: LoggerProvider;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'evaluations.duckdb'), { deriveWhenIdleMs: Infinity });
  llm = await startOpenAITestServer();
  const resource = resourceFromAttributes({ 'service.name': 'evaluated-app' });
  tracers = new TracerProvider({
    resource,
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${agl.url}/v1/traces` }) })],
  });
  loggers = new LoggerProvider({
    resource,
    processors: [new SimpleLogRecordProcessor({ exporter: new OTLPLogExporter({ url: `${agl.url}/v1/logs` }) })],
  });
});
after(async () => {
  await tracers.shutdown();
  await loggers.shutdown();
  await llm.close();
  await agl.close();
  await removeDir(dir);
});

/** One chat call of a rollout, content on the span; returns the span. */
function call(rolloutId: string, question: string) {
  return tracers.getTracer('evaluated-app').startSpan(
    `chat ${question}`,
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'agentlightning.rollout_id': rolloutId,
        'agentlightning.attempt_id': 'at-1',
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'openai',
        'gen_ai.request.model': 'gpt-test',
        [GENAI.inputMessages]: JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: question }] }]),
        [GENAI.outputMessages]: JSON.stringify([
          { role: 'assistant', parts: [{ type: 'text', content: `answer to ${question}` }], finish_reason: 'stop' },
        ]),
      },
    },
    ROOT_CONTEXT,
  );
}

const verdict = (score: number, label: string, explanation: string) => ({
  'gen_ai.evaluation.name': 'correctness',
  'gen_ai.evaluation.score.value': score,
  'gen_ai.evaluation.score.label': label,
  'gen_ai.evaluation.explanation': explanation,
});

test('an evaluation result on a call is a reward of that call, and agl export messages --min-reward follows it', async () => {
  // On a span event: the first of two evaluations is the call's primary reward.
  const good = call('ro-eval-good', 'two plus two');
  good.addEvent(GENAI.evaluationResult, verdict(0.9, 'pass', 'four is right'));
  good.addEvent(GENAI.evaluationResult, { ...verdict(1, 'polite', 'kind words'), 'gen_ai.evaluation.name': 'tone' });
  good.end();
  // As a log record tied to the call by trace and span id, sent before the span itself.
  const bad = call('ro-eval-bad', 'capital of France');
  loggers.getLogger('evaluator').emit({
    eventName: GENAI.evaluationResult,
    context: trace.setSpan(ROOT_CONTEXT, bad),
    attributes: verdict(0.1, 'fail', 'it is Paris, not Lyon'),
  });
  await loggers.forceFlush();
  bad.end();
  await tracers.forceFlush();

  const rewards = await queryRows(
    agl.store,
    `SELECT r.rollout_id, r.name, r.value, r.label, r.feedback, r.source, r.is_primary, r.span_id = c.span_id AS on_the_call
     FROM rewards r JOIN llm_calls c USING (trace_id) WHERE r.source = 'evaluation' ORDER BY r.rollout_id DESC, r.name`,
  );
  const expected = [
    ['ro-eval-good', 'correctness', 0.9, 'pass', 'four is right', 'evaluation', true, true],
    ['ro-eval-good', 'tone', 1, 'polite', 'kind words', 'evaluation', false, true],
    ['ro-eval-bad', 'correctness', 0.1, 'fail', 'it is Paris, not Lyon', 'evaluation', true, true],
  ];
  assert.deepEqual(rewards.map(Object.values), expected);

  for (const derived of [false, true]) {
    if (derived) await agl.store.deriveAll();
    const out = join(dir, `kept-${derived}.jsonl`);
    const run = await runCli(['export', 'messages', '--url', agl.url, '--min-reward', '0.5', '--out', out]);
    assert.equal(run.code, 0, run.stderr);
    const records = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    assert.deepEqual(
      records.map((r: { messages: { content: string }[] }) => r.messages[0].content),
      ['two plus two'],
      derived ? 'derived' : 'not derived yet',
    );
  }
});

test("the official OpenAI instrumentation's newest form, unchanged, gives llm_calls rows", async () => {
  const run = await runApp(
    'otel-openai-responses.cjs',
    {
      OPENAI_BASE_URL: llm.baseURL,
      OTEL_SERVICE_NAME: 'otel-openai-responses',
      OTEL_EXPORTER_OTLP_ENDPOINT: agl.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_LOGS_EXPORTER: 'otlp',
      OTEL_METRICS_EXPORTER: 'none',
      OTEL_SEMCONV_STABILITY_OPT_IN: 'gen_ai_latest_experimental',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
    },
    { register: false },
  );
  assert.equal(run.code, 0, run.stderr);
  const [id] = JSON.parse(run.stdout) as string[];
  const rows = await queryRows(
    agl.store,
    `SELECT c.provider, c.model, c.input_messages, c.output_messages, c.response_id, c.finish_reason, c.parameters,
       c.input_tokens > 0 AS counted
     FROM llm_calls c JOIN spans s USING (trace_id, span_id) WHERE s.service_name = 'otel-openai-responses'`,
  );
  assert.equal(rows.length, 1);
  const [row] = rows;
  assert.deepEqual(
    {
      ...row,
      input_messages: json(row.input_messages),
      output_messages: json(row.output_messages),
      parameters: json(row.parameters),
    },
    {
      provider: 'openai',
      model: 'test-model',
      input_messages: [
        { role: 'system', content: 'Answer in one word.' },
        { role: 'user', content: 'What colour is the sky?' },
      ],
      output_messages: [{ role: 'assistant', content: 'Echo: What colour is the sky?' }],
      response_id: id,
      finish_reason: 'stop',
      parameters: { temperature: 0.25, max_tokens: 40 },
      counted: true,
    },
  );
});
