import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, trace, type Attributes } from '@opentelemetry/api';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { FeedbackReceipt, FeedbackRequest } from '../../src/api/feedback.js';
import { gatewayBaseUrl } from '../../src/client/gateway-url.js';
import { QueryClient } from '../../src/client/query-client.js';
import { creditedCallsSql } from '../../src/sql/credited-calls.js';
import { newTempDir, queryRows, removeDir, runCli, startAgl, type InProcessAgl } from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// Late feedback on a call, whichever instrumentation recorded it: each source agl reads, each
// kind of target, before and after the deriver ran. Everything through HTTP: the calls over
// OTLP and the gateway, the feedback over REST, what became of it over SQL.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;
let sql: QueryClient;
let tracerProvider: TracerProvider;
let loggerProvider: LoggerProvider;

before(async () => {
  dir = await newTempDir();
  llm = await startOpenAITestServer();
  // The deriver runs when a test says so: the first calls are read as spans not derived yet.
  agl = await startAgl(join(dir, 'sources.duckdb'), {
    deriveWhenIdleMs: Number.POSITIVE_INFINITY,
    gateway: { upstream: llm.baseURL },
  });
  sql = new QueryClient(agl.url, { retryDelaysSeconds: [] });
  const resource = resourceFromAttributes({ 'service.name': 'feedback-sources' });
  tracerProvider = new TracerProvider({
    resource,
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${agl.url}/v1/traces` }) })],
  });
  loggerProvider = new LoggerProvider({
    resource,
    processors: [new SimpleLogRecordProcessor({ exporter: new OTLPLogExporter({ url: `${agl.url}/v1/logs` }) })],
  });
});
after(async () => {
  await tracerProvider.shutdown();
  await loggerProvider.shutdown();
  await agl.close();
  await llm.close();
  await removeDir(dir);
});

const rows = async (query: string) => (await sql.query(query)).rows;

async function sendFeedback(body: FeedbackRequest): Promise<{ status: number; answer: Record<string, unknown> }> {
  const response = await fetch(`${agl.url}/v1/agl/feedback`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, answer: (await response.json()) as Record<string, unknown> };
}

/** One call: the question it asked, the rollout it belongs to. */
interface Call {
  readonly question: string;
  readonly rolloutId: string;
  readonly attemptId: string;
}

const attributed = (call: Call): Attributes => ({
  'agentlightning.rollout_id': call.rolloutId,
  'agentlightning.attempt_id': call.attemptId,
});

function exportSpan(name: string, attributes: Attributes): void {
  tracerProvider
    .getTracer('feedback-sources')
    .startSpan(name, { kind: SpanKind.CLIENT, attributes }, ROOT_CONTEXT)
    .end();
}

/** A source agl reads calls from: records `call` as that instrumentation does; answers its response id, if it keeps one. */
interface Source {
  readonly name: string;
  record(call: Call): Promise<string | undefined>;
}

const chatAnswer = (question: string) => ({
  id: `resp-${question}`,
  model: 'm',
  choices: [{ index: 0, message: { role: 'assistant', content: `answer to ${question}` }, finish_reason: 'stop' }],
});

const SOURCES: Source[] = [
  {
    name: "agl's capture, OpenAI chat",
    async record(call) {
      exportSpan('chat m', {
        ...attributed(call),
        'agl.llm.api': 'chat',
        'agl.llm.request': JSON.stringify({ model: 'm', messages: [{ role: 'user', content: call.question }] }),
        'agl.llm.response': JSON.stringify(chatAnswer(call.question)),
      });
      return `resp-${call.question}`;
    },
  },
  {
    name: "agl's capture, Anthropic Messages",
    async record(call) {
      exportSpan('chat claude', {
        ...attributed(call),
        'agl.llm.api': 'messages',
        'gen_ai.provider.name': 'anthropic',
        'agl.llm.request': JSON.stringify({
          model: 'claude',
          max_tokens: 64,
          messages: [{ role: 'user', content: call.question }],
        }),
        'agl.llm.response': JSON.stringify({
          id: `resp-${call.question}`,
          type: 'message',
          role: 'assistant',
          model: 'claude',
          content: [{ type: 'text', text: `answer to ${call.question}` }],
          stop_reason: 'end_turn',
          usage: { input_tokens: 3, output_tokens: 3 },
        }),
      });
      return `resp-${call.question}`;
    },
  },
  {
    name: "agl's gateway",
    async record(call) {
      const answer = await fetch(`${gatewayBaseUrl(agl.url, call.rolloutId, call.attemptId)}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: call.question }] }),
      });
      assert.equal(answer.status, 200);
      return ((await answer.json()) as { id: string }).id;
    },
  },
  {
    // llm_calls keeps the gateway's row of the call (the exact upstream exchange), not the capture's.
    name: "agl's capture of a call through the gateway",
    async record(call) {
      const tracer = tracerProvider.getTracer('feedback-sources');
      const capture = tracer.startSpan('chat test-model', { kind: SpanKind.CLIENT }, ROOT_CONTEXT);
      const { traceId, spanId } = capture.spanContext();
      const request = { model: 'test-model', messages: [{ role: 'user', content: call.question }] };
      const answer = await fetch(`${gatewayBaseUrl(agl.url, call.rolloutId, call.attemptId)}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', traceparent: `00-${traceId}-${spanId}-01` },
        body: JSON.stringify(request),
      });
      const response = await answer.text();
      capture.setAttributes({
        ...attributed(call),
        'agl.llm.api': 'chat',
        'agl.llm.request': JSON.stringify(request),
        'agl.llm.response': response,
      });
      capture.end();
      return (JSON.parse(response) as { id: string }).id;
    },
  },
  {
    name: 'GenAI conventions: gen_ai.provider.name, messages as parts',
    async record(call) {
      exportSpan('chat m', {
        ...attributed(call),
        'gen_ai.provider.name': 'openai',
        'gen_ai.request.model': 'm',
        'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: call.question }] }]),
        'gen_ai.output.messages': JSON.stringify([
          { role: 'assistant', parts: [{ type: 'text', content: 'answer' }], finish_reason: 'stop' },
        ]),
        'gen_ai.usage.input_tokens': 3,
        'gen_ai.usage.output_tokens': 1,
        'gen_ai.response.id': `resp-${call.question}`,
      });
      return `resp-${call.question}`;
    },
  },
  {
    name: 'GenAI conventions: gen_ai.system, prompt_tokens',
    async record(call) {
      exportSpan('chat m', {
        ...attributed(call),
        'gen_ai.system': 'openai',
        'gen_ai.request.model': 'm',
        'gen_ai.input.messages': JSON.stringify([{ role: 'user', parts: [{ type: 'text', content: call.question }] }]),
        'gen_ai.output.messages': JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: 'answer' }] }]),
        'gen_ai.usage.prompt_tokens': 3,
        'gen_ai.usage.completion_tokens': 1,
        'gen_ai.response.finish_reasons': ['stop'],
        'gen_ai.response.id': `resp-${call.question}`,
      });
      return `resp-${call.question}`;
    },
  },
  {
    name: 'GenAI events: content in log records (@opentelemetry/instrumentation-openai)',
    async record(call) {
      const span = tracerProvider.getTracer('feedback-sources').startSpan(
        'chat m',
        {
          kind: SpanKind.CLIENT,
          attributes: {
            ...attributed(call),
            'gen_ai.system': 'openai',
            'gen_ai.request.model': 'm',
            'gen_ai.response.id': `resp-${call.question}`,
          },
        },
        ROOT_CONTEXT,
      );
      const context = trace.setSpan(ROOT_CONTEXT, span);
      const logger = loggerProvider.getLogger('@opentelemetry/instrumentation-openai');
      logger.emit({ eventName: 'gen_ai.user.message', body: { content: call.question }, context });
      logger.emit({
        eventName: 'gen_ai.choice',
        body: { index: 0, finish_reason: 'stop', message: { content: 'answer' } },
        context,
      });
      span.end();
      await loggerProvider.forceFlush();
      return `resp-${call.question}`;
    },
  },
  {
    name: 'OpenLLMetry: gen_ai.prompt.N.*',
    async record(call) {
      exportSpan('openai.chat', {
        ...attributed(call),
        'gen_ai.system': 'openai',
        'gen_ai.request.model': 'm',
        'gen_ai.prompt.0.role': 'user',
        'gen_ai.prompt.0.content': call.question,
        'gen_ai.completion.0.role': 'assistant',
        'gen_ai.completion.0.content': 'answer',
        'gen_ai.response.id': `resp-${call.question}`,
      });
      return `resp-${call.question}`;
    },
  },
  {
    name: 'OpenLLMetry, Anthropic: content as JSON blocks',
    async record(call) {
      exportSpan('anthropic.chat', {
        ...attributed(call),
        'gen_ai.system': 'Anthropic',
        'gen_ai.request.model': 'claude',
        'gen_ai.prompt.0.role': 'user',
        'gen_ai.prompt.0.content': JSON.stringify([{ type: 'text', text: call.question }]),
        'gen_ai.completion.0.role': 'assistant',
        'gen_ai.completion.0.content': JSON.stringify([{ type: 'text', text: 'answer' }]),
        'gen_ai.completion.0.finish_reason': 'end_turn',
        'gen_ai.response.id': `resp-${call.question}`,
      });
      return `resp-${call.question}`;
    },
  },
  {
    // OpenInference keeps no response id: the lookup by one has nothing to find.
    name: 'OpenInference: llm.input_messages.N.*',
    async record(call) {
      exportSpan('ChatOpenAI', {
        ...attributed(call),
        'openinference.span.kind': 'LLM',
        'llm.model_name': 'm',
        'llm.provider': 'openai',
        'llm.input_messages.0.message.role': 'user',
        'llm.input_messages.0.message.content': call.question,
        'llm.output_messages.0.message.role': 'assistant',
        'llm.output_messages.0.message.content': 'answer',
      });
      return undefined;
    },
  },
];

/** The kinds of target a feedback names a call by. */
type Lookup = 'trace and span' | 'trace' | 'response id' | 'rollout';
const LOOKUPS: Lookup[] = ['trace and span', 'trace', 'response id', 'rollout'];

/** A recorded call and what llm_calls shows of it. */
interface Recorded {
  readonly source: Source;
  readonly lookup: Lookup;
  readonly call: Call;
  readonly responseId: string | undefined;
  readonly row: Record<string, unknown>;
}

/** One call per source and lookup, each in a rollout and trace of its own; read back from llm_calls. */
async function recordEveryCall(state: string): Promise<Recorded[]> {
  const recorded: Omit<Recorded, 'row'>[] = [];
  for (const [s, source] of SOURCES.entries())
    for (const lookup of LOOKUPS) {
      const rollout = await agl.store.lightning.startRollout({ input: { source: source.name, lookup } });
      const call = {
        question: `${state}-${s}-${lookup.replaceAll(' ', '-')}`,
        rolloutId: rollout.rollout_id,
        attemptId: rollout.attempt.attempt_id,
      };
      if (lookup === 'response id' && source.name.startsWith('OpenInference')) continue;
      recorded.push({ source, lookup, call, responseId: await source.record(call) });
    }
  await tracerProvider.forceFlush();
  await loggerProvider.forceFlush();
  const ids = recorded.map(({ call }) => `'${call.rolloutId}'`).join(', ');
  const calls = await rows(
    `SELECT rollout_id, trace_id, span_id, response_id, end_time FROM llm_calls WHERE rollout_id IN (${ids})`,
  );
  return recorded.map((entry) => {
    const found = calls.filter((row) => row.rollout_id === entry.call.rolloutId);
    assert.equal(found.length, 1, `${entry.source.name}: one row in llm_calls`);
    if (entry.responseId !== undefined) assert.equal(found[0].response_id, entry.responseId, entry.source.name);
    return { ...entry, row: found[0] };
  });
}

function targetOf({ lookup, call, responseId, row }: Recorded): FeedbackRequest {
  const common = { name: 'thumbs', value: 0.25, comment: `on ${call.question}` };
  switch (lookup) {
    case 'trace and span':
      return { ...common, trace_id: String(row.trace_id), span_id: String(row.span_id) };
    case 'trace':
      return { ...common, trace_id: String(row.trace_id) };
    case 'response id':
      return { ...common, response_id: responseId };
    case 'rollout':
      return { ...common, rollout_id: call.rolloutId };
  }
}

/** Feedback on each recorded call by its lookup: it goes to the call llm_calls shows, and credit gives it there. */
async function feedbackOnEach(recorded: Recorded[]): Promise<void> {
  const receipts: FeedbackReceipt[] = [];
  for (const entry of recorded) {
    const { status, answer } = await sendFeedback(targetOf(entry));
    assert.equal(status, 201, `${entry.source.name}, by ${entry.lookup}: ${JSON.stringify(answer)}`);
    receipts.push(answer as unknown as FeedbackReceipt);
  }
  const feedbackIds = receipts.map((receipt) => `'${receipt.span_id}'`).join(', ');
  const rewards = await rows(
    `SELECT span_id, trace_id, rollout_id, name, value, feedback, source FROM rewards WHERE span_id IN (${feedbackIds})`,
  );
  const traces = recorded.map(({ row }) => `'${row.trace_id}'`).join(', ');
  const credits = await rows(
    creditedCallsSql({ where: `trace_id IN (${traces})` }, 's.span_id, s.reward, s.reward_span_id'),
  );
  for (const [i, entry] of recorded.entries()) {
    const what = `${entry.source.name}, by ${entry.lookup}`;
    const receipt = receipts[i];
    assert.deepEqual(
      [receipt.trace_id, receipt.target_span_id, receipt.rollout_id],
      [entry.row.trace_id, entry.row.span_id, entry.call.rolloutId],
      `${what}: the call llm_calls shows`,
    );
    assert.deepEqual(
      rewards.find((reward) => reward.span_id === receipt.span_id),
      {
        span_id: receipt.span_id,
        trace_id: entry.row.trace_id,
        rollout_id: entry.call.rolloutId,
        name: 'thumbs',
        value: 0.25,
        feedback: `on ${entry.call.question}`,
        source: 'feedback',
      },
      `${what}: its rewards row`,
    );
    const credit = credits.find((call) => call.span_id === entry.row.span_id);
    assert.deepEqual(
      [credit?.reward, credit?.reward_span_id],
      [0.25, receipt.span_id],
      `${what}: credited to the call`,
    );
  }
}

describe('feedback on a call of every source agl reads', () => {
  test('before the deriver ran: the calls read from spans not derived yet', async () => {
    const recorded = await recordEveryCall('fresh');
    const [{ pending }] = await queryRows(agl.store, 'SELECT count(*)::INTEGER AS pending FROM underived_spans');
    assert.ok(Number(pending) >= recorded.length, 'the spans wait for the deriver');
    await feedbackOnEach(recorded);
  });

  test('after the deriver ran: the calls read from the derived rows', async () => {
    const recorded = await recordEveryCall('derived');
    await agl.store.deriveAll();
    const [{ pending }] = await queryRows(agl.store, 'SELECT count(*)::INTEGER AS pending FROM underived_spans');
    assert.equal(pending, 0);
    await feedbackOnEach(recorded);
  });
});

test('an app on the official OpenAI instrumentation: feedback by the response id llm_calls shows', async () => {
  const run = await runApp(
    'otel-openai-chat.cjs',
    {
      OPENAI_BASE_URL: llm.baseURL,
      OTEL_SERVICE_NAME: 'otel-openai-chat',
      OTEL_EXPORTER_OTLP_ENDPOINT: agl.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_LOGS_EXPORTER: 'otlp',
      OTEL_METRICS_EXPORTER: 'none',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
    },
    { register: false },
  );
  assert.equal(run.code, 0, run.stderr);
  const ids = JSON.parse(run.stdout) as string[];
  const calls = await rows(
    `SELECT c.trace_id, c.span_id, c.response_id, c.rollout_id FROM llm_calls c JOIN spans s USING (trace_id, span_id)
     WHERE s.service_name = 'otel-openai-chat' ORDER BY c.start_time`,
  );
  assert.deepEqual(
    calls.map((call) => [call.response_id, call.rollout_id]),
    ids.map((id) => [id, null]),
  );
  const second = calls[1];
  const { status, answer } = await sendFeedback({
    response_id: ids[1],
    name: 'thumbs',
    value: 0,
    comment: 'wrong answer',
  });
  assert.equal(status, 201, JSON.stringify(answer));
  assert.deepEqual([answer.trace_id, answer.target_span_id], [second.trace_id, second.span_id]);
  const [reward] = await rows(`SELECT value, feedback FROM rewards WHERE span_id = '${answer.span_id}'`);
  assert.deepEqual(reward, { value: 0, feedback: 'wrong answer' });

  const out = join(dir, 'otel-openai-chat.jsonl');
  const exported = await runCli(['export', 'triplets', '--url', agl.url, '--out', out]);
  assert.equal(exported.code, 0, exported.stderr);
  const credit = Object.fromEntries(
    (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { prompt: { messages: { content: unknown }[] }; reward: number | null })
      .map((triplet) => [triplet.prompt.messages[0]?.content, triplet.reward])
      .filter(([question]) => typeof question === 'string' && question.endsWith(' question')),
  );
  assert.deepEqual(credit, { 'first question': null, 'second question': 0, 'third question': null });
});
