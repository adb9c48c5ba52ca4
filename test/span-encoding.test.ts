import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SpanStatusCode } from '@opentelemetry/api';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { SpanEncoder } from '../src/instrumentation/span-encoding.js';

// agl/register's exporter joins spans encoded as each ended: the request must be the one the
// SDK's own serializer makes of the same spans.

test('a request joined from spans encoded as they ended is the SDK serializer\'s request, byte for byte', () => {
  const encoder = new SpanEncoder();
  const exporter = new InMemorySpanExporter();
  const providers = ['agent', 'gateway'].map((service) => new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': service, 'process.pid': 42 }),
    spanProcessors: [encoder, new SimpleSpanProcessor({ exporter })],
  }));
  for (const [i, provider] of [...providers, providers[0]].entries()) {
    for (const scope of ['agl', 'langchain']) {
      const tracer = provider.getTracer(scope, '1.0');
      const parent = tracer.startSpan(`step ${i}`, { attributes: { 'agent.name': 'solver', turn: i, tags: ['a', 'b'], ok: true, 'agl.llm.request': 'é'.repeat(300) } });
      parent.addEvent('retry', { attempt: 2 });
      parent.setStatus({ code: SpanStatusCode.ERROR, message: 'failed' });
      parent.end();
      tracer.startSpan('tool', { links: [{ context: parent.spanContext(), attributes: { why: 'follows' } }] }).end();
    }
  }
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 12);
  const expected = Buffer.from(ProtobufTraceSerializer.serializeRequest(spans)!);
  assert.deepEqual(Buffer.from(encoder.request(spans)!), expected);
  // A span that did not pass the encoder (ended before it was installed) is encoded at export.
  assert.deepEqual(Buffer.from(new SpanEncoder().request(spans)!), expected);
  assert.deepEqual(Buffer.from(encoder.request(spans.slice(0, 1))!), Buffer.from(ProtobufTraceSerializer.serializeRequest(spans.slice(0, 1))!));
});
