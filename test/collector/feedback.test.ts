import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { context, SpanKind, trace, type Attributes, type Span } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { StoreClient } from '../../src/client.js';
import { newTempDir, queryRows, removeDir, runCli, startAgl, type InProcessAgl } from '../support/helpers.js';

// Late feedback on spans an app exported over OTLP, without rollouts (and on a rollout's): each
// kind of target, then what the rewards view, triplet credit and `--min-reward` make of it.

let dir: string;
let agl: InProcessAgl;
let client: StoreClient;
let provider: TracerProvider;
const ids: Record<string, { traceId: string; spanId: string }> = {};

/** An OpenLLMetry-style call asked `question`, recorded under `parent`. */
function call(question: string, parent: Span | undefined, extra: Attributes = {}): void {
  const tracer = provider.getTracer('feedback-test');
  const span = tracer.startSpan(
    'openai.chat',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'gen_ai.system': 'openai',
        'gen_ai.request.model': 'm',
        'gen_ai.prompt.0.role': 'user',
        'gen_ai.prompt.0.content': question,
        'gen_ai.completion.0.role': 'assistant',
        'gen_ai.completion.0.content': `answer to ${question}`,
        'gen_ai.response.id': `resp-${question}`,
        ...extra,
      },
    },
    parent ? trace.setSpan(context.active(), parent) : undefined,
  );
  span.end();
  ids[question] = { traceId: span.spanContext().traceId, spanId: span.spanContext().spanId };
}

let rolloutId: string;
let emptyRolloutId: string;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'feedback.duckdb'));
  client = new StoreClient(agl.url, { retryDelaysSeconds: [] });
  provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'chat-app' }),
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${agl.url}/v1/traces` }) })],
  });
  const rollout = await agl.store.lightning.startRollout({ input: { task: 'r' } });
  rolloutId = rollout.rollout_id;
  emptyRolloutId = (await agl.store.lightning.startRollout({ input: { task: 'empty' } })).rollout_id;
  const app = provider.getTracer('feedback-test').startSpan('app');
  call('a1', app);
  call('a2', app);
  app.end();
  for (const question of ['b', 'c', 'd']) call(question, undefined);
  call('r', undefined, {
    'agentlightning.rollout_id': rolloutId,
    'agentlightning.attempt_id': rollout.attempt.attempt_id,
  });
  await provider.forceFlush();
});
after(async () => {
  await provider.shutdown();
  await agl.close();
  await removeDir(dir);
});

test('feedback by trace and span, trace, response id and rollout goes to the call each names', async () => {
  const byTrace = await client.sendFeedback({
    feedback_id: 'fb-a',
    trace_id: ids.a1.traceId,
    name: 'thumbs',
    value: 1,
    comment: 'great answer',
  });
  assert.equal(byTrace.target_span_id, ids.a2.spanId, 'a trace without a span: its last call');
  assert.equal(byTrace.stored, true);
  const bySpan = await client.sendFeedback({
    trace_id: ids.a1.traceId,
    span_id: ids.a1.spanId,
    name: 'thumbs',
    value: 0.7,
  });
  assert.equal(bySpan.target_span_id, ids.a1.spanId);
  const byResponse = await client.sendFeedback({ response_id: 'resp-b', name: 'thumbs', value: 1 });
  assert.deepEqual([byResponse.trace_id, byResponse.target_span_id], [ids.b.traceId, ids.b.spanId]);
  await client.sendFeedback({ trace_id: ids.c.traceId, span_id: ids.c.spanId, name: 'thumbs', value: 0 });
  const byRollout = await client.sendFeedback({ rollout_id: rolloutId, name: 'rating', value: 0.9 });
  assert.deepEqual([byRollout.rollout_id, byRollout.target_span_id], [rolloutId, ids.r.spanId]);
  const empty = await client.sendFeedback({ rollout_id: emptyRolloutId, name: 'rating', value: 0.5 });
  assert.equal(empty.target_span_id, null, 'a rollout with no span yet gets the feedback all the same');

  const rewards = await queryRows(
    agl.store,
    `SELECT trace_id, rollout_id, name, value, is_primary, feedback, source FROM rewards WHERE span_id = '${byTrace.span_id}'`,
  );
  assert.deepEqual(rewards, [
    {
      trace_id: ids.a1.traceId,
      rollout_id: null,
      name: 'thumbs',
      value: 1,
      is_primary: true,
      feedback: 'great answer',
      source: 'feedback',
    },
  ]);
  const [rolled] = await queryRows(agl.store, `SELECT value FROM rewards WHERE rollout_id = '${emptyRolloutId}'`);
  assert.equal(rolled.value, 0.5);

  const out = join(dir, 'triplets.jsonl');
  const exported = await runCli(['export', 'triplets', '--url', agl.url, '--out', out]);
  assert.equal(exported.code, 0, exported.stderr);
  const credit = Object.fromEntries(
    (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { prompt: { messages: { content: string }[] }; reward: number | null })
      .map((t) => [t.prompt.messages[0].content, t.reward]),
  );
  assert.deepEqual(credit, { a1: 0.7, a2: 1, b: 1, c: 0, d: null, r: 0.9 });
});

test('agl export messages --min-reward keeps exactly the calls whose feedback reaches it', async () => {
  const out = join(dir, 'kept.jsonl');
  const exported = await runCli(['export', 'messages', '--url', agl.url, '--min-reward', '0.5', '--out', out]);
  assert.equal(exported.code, 0, exported.stderr);
  const kept = (await readFile(out, 'utf8'))
    .trim()
    .split('\n')
    .map((line) => (JSON.parse(line) as { messages: { content: string }[] }).messages[0].content);
  assert.deepEqual(kept.sort(), ['a1', 'a2', 'b', 'r']);
});

test('the same feedback_id twice is stored once', async () => {
  const again = await client.sendFeedback({ feedback_id: 'fb-a', trace_id: ids.a1.traceId, name: 'thumbs', value: 0 });
  assert.equal(again.stored, false);
  assert.equal(again.target_span_id, ids.a2.spanId);
  const rows = await queryRows(agl.store, `SELECT value FROM rewards WHERE span_id = '${again.span_id}'`);
  assert.deepEqual(rows, [{ value: 1 }], 'the first one stays');
});

test('an unknown target is a 404 that names it; a bad body is a 400 that names the problem', async () => {
  const refused = async (body: object) => {
    const response = await fetch(`${agl.url}/v1/agl/feedback`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: response.status, detail: ((await response.json()) as { detail: string }).detail };
  };
  const unknownTrace = 'f'.repeat(32);
  assert.deepEqual(await refused({ trace_id: unknownTrace, name: 'n', value: 1 }), {
    status: 404,
    detail: `no trace ${unknownTrace}`,
  });
  const unknownSpan = await refused({ trace_id: ids.b.traceId, span_id: 'e'.repeat(16), name: 'n', value: 1 });
  assert.equal(unknownSpan.status, 404);
  assert.match(unknownSpan.detail, /no span e{16} in trace/);
  assert.match((await refused({ response_id: 'resp-nope', name: 'n', value: 1 })).detail, /resp-nope/);
  assert.match((await refused({ rollout_id: 'ro-nope', name: 'n', value: 1 })).detail, /no rollout ro-nope/);
  const noTarget = await refused({ name: 'n', value: 1 });
  assert.equal(noTarget.status, 400);
  assert.match(noTarget.detail, /exactly one target/);
  assert.match((await refused({ response_id: 'resp-b', name: 'n', value: 'high' })).detail, /value must be a number/);
  assert.match((await refused({ response_id: 'resp-b', value: 1 })).detail, /name/);
});
