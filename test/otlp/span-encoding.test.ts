import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createTraceState, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  TracerProvider,
  type ReadableSpan,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { requestOf, SpanEncoder } from '../../src/otlp/span-encoding.js';
import { serialized } from '../support/otlp-batches.js';

// agl/register's exporter joins spans encoded as each ended: the request must be the one the
// SDK's own serializer makes of the same spans.

/** What SpanEncoder hands on (to the export queue, in agl/register). */
function queue(): { queued: ReadableSpan[]; processor: SpanProcessor } {
  const queued: ReadableSpan[] = [];
  const processor = {
    onStart() {},
    onEnd: (span: ReadableSpan) => void queued.push(span),
    forceFlush: async () => {},
    shutdown: async () => {},
  };
  return { queued, processor };
}

test("a request joined from spans encoded as they ended is the SDK serializer's request, byte for byte", () => {
  const { queued, processor } = queue();
  const encoder = new SpanEncoder([processor]);
  const exporter = new InMemorySpanExporter();
  const providers = ['agent', 'gateway'].map(
    (service) =>
      new TracerProvider({
        resource: resourceFromAttributes({ 'service.name': service, 'process.pid': 42 }),
        spanProcessors: [encoder, new SimpleSpanProcessor({ exporter })],
      }),
  );
  for (const [i, provider] of [...providers, providers[0]].entries()) {
    for (const scope of ['agl', 'langchain']) {
      const tracer = provider.getTracer(scope, '1.0');
      const parent = tracer.startSpan(`step ${i}`, {
        attributes: { 'agent.name': 'solver', turn: i, tags: ['a', 'b'], ok: true, 'agl.llm.request': 'é'.repeat(300) },
      });
      parent.addEvent('retry', { attempt: 2 });
      parent.setStatus({ code: SpanStatusCode.ERROR, message: 'failed' });
      parent.end();
      tracer.startSpan('tool', { links: [{ context: parent.spanContext(), attributes: { why: 'follows' } }] }).end();
    }
  }
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 12);
  const expected = serialized(ProtobufTraceSerializer.serializeRequest(spans));
  assert.equal(queued.length, 12);
  assert.deepEqual(Buffer.from(requestOf(queued)), expected);
  // The queue holds the encodings, not the spans with their attributes and events.
  assert.ok(!('attributes' in queued[0]) && !('events' in queued[0]));
  // A span that did not pass the encoder (ended before it was installed) is encoded at export.
  assert.deepEqual(Buffer.from(requestOf(spans)), expected);
  assert.deepEqual(
    Buffer.from(requestOf(queued.slice(0, 1))),
    serialized(ProtobufTraceSerializer.serializeRequest(spans.slice(0, 1))),
  );
});

test('a resource whose attributes were still pending when its spans ended is encoded with them', async () => {
  const { queued, processor } = queue();
  const exporter = new InMemorySpanExporter();
  const resource = resourceFromAttributes({
    'service.name': 'agent',
    'host.id': new Promise<string>((resolve) => setTimeout(() => resolve('h-1'), 10)),
  });
  const provider = new TracerProvider({
    resource,
    spanProcessors: [new SpanEncoder([processor]), new SimpleSpanProcessor({ exporter })],
  });
  provider.getTracer('agl').startSpan('step').end();
  assert.equal(resource.asyncAttributesPending, true);
  await resource.waitForAsyncAttributes?.();
  const spans = exporter.getFinishedSpans();
  assert.deepEqual(Buffer.from(requestOf(queued)), serialized(ProtobufTraceSerializer.serializeRequest(spans)));
  assert.match(Buffer.from(requestOf(queued)).toString('latin1'), /h-1/);
});

test('every kind of value and field is encoded as the SDK serializer encodes it', () => {
  const { queued, processor } = queue();
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({
    spanProcessors: [new SpanEncoder([processor]), new SimpleSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer('agl');
  const remote = trace.setSpanContext(ROOT_CONTEXT, {
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    traceFlags: 1,
    isRemote: true,
    traceState: createTraceState('vendor=value,other=1'),
  });
  const long = 'x'.repeat(200) + 'ü'.repeat(10_000); // lengths of two and three varint bytes
  const attributes = {
    text: long,
    empty: '',
    negative: -42,
    big: 2 ** 53 + 2,
    double: 0.25,
    nan: NaN,
    huge: 2 ** 64,
    yes: true,
    no: false,
    words: ['a', long],
    numbers: [1, -2.5],
    flags: [true, false],
    none: [],
  };
  for (const kind of [SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER]) {
    const span = tracer.startSpan(
      kind === SpanKind.SERVER ? '' : `kind ${kind}`,
      { kind, attributes, startTime: [1_700_000_000, 123_456_789] },
      remote,
    );
    // One span far larger than the encoder's buffer, which grows for it and shrinks after.
    if (kind === SpanKind.SERVER) span.setAttribute('huge', 'y'.repeat(2 ** 21));
    span.addEvent('event', { long }, [1_700_000_001, 5]);
    span.addLink({
      context: {
        traceId: '0af7651916cd43dd8448eb211c80319c',
        spanId: '00f067aa0ba902b7',
        traceFlags: 0,
        traceState: createTraceState('a=b'),
      },
    });
    if (kind === SpanKind.CLIENT) span.setStatus({ code: SpanStatusCode.OK });
    span.end([1_700_000_002, 999_999_999]);
  }
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 5);
  assert.deepEqual(Buffer.from(requestOf(queued)), serialized(ProtobufTraceSerializer.serializeRequest(spans)));
});

test('attributes that repeat, change, or change type from span to span are encoded as the SDK encodes each span', () => {
  const { queued, processor } = queue();
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({
    spanProcessors: [new SpanEncoder([processor]), new SimpleSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer('agl');
  const kinds = ['POST', 7, '7', true, 'true', 'é', -0, 0, 'x'.repeat(65)];
  for (let i = 0; i < 40; i++) {
    // Repeated every time, alternating, always new, changing type, and keys in another order.
    const attributes = {
      'http.request.method': 'POST',
      'gen_ai.request.model': i % 2 === 0 ? 'model-a' : 'model-b',
      'gen_ai.usage.input_tokens': 100 + i,
      changing: kinds[i % kinds.length],
      ...(i % 3 === 0
        ? { 'gen_ai.response.finish_reasons': ['stop'], first: 'a' }
        : { first: 'a', 'gen_ai.response.finish_reasons': ['length'] }),
    };
    tracer.startSpan('chat', { attributes }).end();
  }
  const spans = exporter.getFinishedSpans();
  assert.equal(queued.length, 40);
  for (let i = 0; i < spans.length; i++) {
    assert.deepEqual(
      Buffer.from(requestOf(queued.slice(i, i + 1))),
      serialized(ProtobufTraceSerializer.serializeRequest(spans.slice(i, i + 1))),
      `span ${i}`,
    );
  }
});
