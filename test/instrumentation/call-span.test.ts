import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Span } from '@opentelemetry/api';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  TracerProvider,
  type ReadableSpan,
  type Span as SdkSpan,
} from '@opentelemetry/sdk-trace';
import { callSpanStarter } from '../../src/instrumentation/call-span.js';
import { readConfig } from '../../src/instrumentation/config.js';
import { requestOf, SpanEncoder } from '../../src/otlp/span-encoding.js';
import { withRollout } from '../../src/index.js';
import { serialized } from '../support/otlp-batches.js';

// agl/register records LLM call spans without the SDK's span machinery (call-span.ts): what it
// records must be what the SDK's span would have held, encoded the same way.

const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({
  resource: resourceFromAttributes({ 'service.name': 'agent' }),
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
});
const tracer = provider.getTracer('agl');
// The SDK's tracer makes SDK spans: an API span that is a ReadableSpan too.
const probe = tracer.startSpan('probe') as SdkSpan;
const start = callSpanStarter({
  resource: probe.resource,
  instrumentationScope: probe.instrumentationScope,
  processor: new SimpleSpanProcessor({ exporter }),
});

/** What the fetch capture does to an LLM span, done to `span`. */
function describeCall(span: Span, failure?: Error): void {
  span.updateName('chat model-a');
  span.setAttributes({
    'gen_ai.request.model': 'model-a',
    'gen_ai.request.temperature': 0.5,
    'gen_ai.response.finish_reasons': ['stop'],
    dropped: undefined,
  });
  span.setAttribute('http.response.status_code', failure ? 500 : 200);
  if (failure) {
    span.recordException(failure);
    span.setStatus({ code: SpanStatusCode.ERROR, message: failure.message });
  }
  span.end(Date.now() + 5);
}

test("a call span holds what the SDK's span holds for the same call, under the same resource and scope", () => {
  exporter.reset();
  const parent = tracer.startSpan('agent step');
  const inStep = trace.setSpan(ROOT_CONTEXT, parent);
  for (const failure of [undefined, Object.assign(new Error('upstream broke'), { code: 'ECONNRESET' })]) {
    describeCall(tracer.startSpan('chat', { kind: SpanKind.CLIENT }, inStep), failure);
    describeCall(start('chat', inStep), failure);
  }
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 4);
  for (const [sdk, ours] of [
    [spans[0], spans[1]],
    [spans[2], spans[3]],
  ]) {
    assert.equal(ours.name, sdk.name);
    assert.equal(ours.kind, sdk.kind);
    assert.deepEqual(ours.attributes, sdk.attributes);
    assert.deepEqual(ours.status, sdk.status);
    assert.deepEqual(
      ours.events.map((e) => [e.name, e.attributes]),
      sdk.events.map((e) => [e.name, e.attributes]),
    );
    assert.equal(ours.resource, sdk.resource);
    assert.deepEqual(ours.instrumentationScope, sdk.instrumentationScope);
    assert.equal(ours.spanContext().traceId, parent.spanContext().traceId);
    assert.equal(ours.parentSpanContext?.spanId, parent.spanContext().spanId);
    assert.equal(ours.spanContext().traceFlags, TraceFlags.SAMPLED);
    assert.ok(ours.ended);
    assert.ok(ours.duration[0] >= 0 && ours.duration[1] >= 0);
    // agl's encoder writes it as the SDK's serializer does.
    const queued: ReadableSpan[] = [];
    new SpanEncoder([
      { onStart() {}, onEnd: (span) => void queued.push(span), forceFlush: async () => {}, shutdown: async () => {} },
    ]).onEnd(ours);
    assert.deepEqual(Buffer.from(requestOf(queued)), serialized(ProtobufTraceSerializer.serializeRequest([ours])));
  }
  // Ended once; later changes are ignored, as the SDK ignores them.
  const [, ours] = spans;
  (ours as SdkSpan).setAttribute('late', 1);
  (ours as SdkSpan).end();
  assert.equal(exporter.getFinishedSpans().length, 4);
  assert.equal(ours.attributes.late, undefined);
});

test('a call span starts a trace of its own at the root, and is not recorded under an unsampled parent', () => {
  exporter.reset();
  const root = start('chat', ROOT_CONTEXT);
  root.end();
  const [recorded] = exporter.getFinishedSpans();
  assert.equal(recorded.parentSpanContext, undefined);
  assert.match(recorded.spanContext().traceId, /^[0-9a-f]{32}$/);
  assert.notEqual(recorded.spanContext().traceId, '0'.repeat(32));

  const unsampled = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    traceFlags: TraceFlags.NONE,
    isRemote: true,
  });
  const span = start('chat', unsampled);
  assert.equal(span.isRecording(), false);
  assert.equal(span.spanContext().traceId, '0af7651916cd43dd8448eb211c80319c', 'its request still carries the trace');
  assert.notEqual(span.spanContext().spanId, 'b7ad6b7169203331');
  span.end();
  assert.equal(exporter.getFinishedSpans().length, 1);
});

test('a call span made inside withRollout belongs to that rollout', async () => {
  exporter.reset();
  await Promise.all(
    ['a', 'b'].map((id) =>
      withRollout({ rollout_id: `ro-${id}`, attempt_id: `at-${id}` }, async () => {
        await new Promise((resolve) => setImmediate(resolve));
        start('chat', ROOT_CONTEXT).end();
      }),
    ),
  );
  const attribution = exporter
    .getFinishedSpans()
    .map((span) => [span.attributes['agentlightning.rollout_id'], span.attributes['agentlightning.attempt_id']]);
  assert.deepEqual(attribution.sort(), [
    ['ro-a', 'at-a'],
    ['ro-b', 'at-b'],
  ]);
});

test('a sampler other than the default, or attribute limits, leave LLM call spans to the SDK', () => {
  assert.equal(readConfig({}).sdkCallSpans, false);
  assert.equal(readConfig({ OTEL_TRACES_SAMPLER: 'parentbased_always_on' }).sdkCallSpans, false);
  assert.equal(readConfig({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }).sdkCallSpans, true);
  assert.equal(readConfig({ OTEL_TRACES_SAMPLER: 'always_off' }).sdkCallSpans, true);
  assert.equal(readConfig({ OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: '1000' }).sdkCallSpans, true);
  assert.equal(readConfig({ OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT: '16' }).sdkCallSpans, true);
});

test('a pipeline that fails to take a call span does not throw into the app', () => {
  const failing = callSpanStarter({
    resource: probe.resource,
    instrumentationScope: probe.instrumentationScope,
    processor: {
      onStart() {},
      onEnd() {
        throw new Error('queue broke');
      },
      forceFlush: async () => {},
      shutdown: async () => {},
    },
  });
  const span = failing('chat', ROOT_CONTEXT);
  assert.doesNotThrow(() => span.end());
  assert.equal(span.isRecording(), false);
});

test('a call span keeps the wall clock the SDK spans keep, when the monotonic clock has drifted from it', (t) => {
  // In a long-lived process the monotonic clock (performance.now() from timeOrigin) drifts from
  // Date.now(); here it runs a second ahead. The SDK's spans start from the wall clock.
  const realNow = performance.now.bind(performance);
  t.mock.method(performance, 'now', () => realNow() + 1000);
  exporter.reset();
  const before = Date.now();
  describeCall(tracer.startSpan('chat', { kind: SpanKind.CLIENT }), undefined);
  describeCall(start('chat', ROOT_CONTEXT), undefined);
  const ended = start('chat', ROOT_CONTEXT);
  ended.end();
  const [sdk, ours, plain] = exporter.getFinishedSpans();
  const millis = ([s, ns]: [number, number]) => s * 1000 + ns / 1e6;
  for (const span of [sdk, ours, plain]) assert.ok(millis(span.duration) >= 0, `${millis(span.duration)} ms`);
  assert.ok(Math.abs(millis(ours.startTime) - millis(sdk.startTime)) < 500, 'starts on the same clock as the SDK span');
  assert.ok(millis(plain.startTime) - before < 500);
});
