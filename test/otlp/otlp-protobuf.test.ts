import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { OtlpDecoder } from '../../src/otlp/decode.js';
import type { ByteColumn, ColumnValue } from '../../src/otlp/columns.js';
import { SPAN } from '../../src/otlp/span-columns.js';
import { serialized } from '../support/otlp-batches.js';

// The protobuf decoder reuses the JSON of an attribute that comes again at the same position
// with the same bytes (most of an SDK's attributes repeat in every span): what it reads must be
// what the span holds all the same. One decoder serves every test, as one serves a decode
// thread: what it learned from one request must not leak into the next.
const decoder = new OtlpDecoder();

function request(attributes: (i: number) => Record<string, string | number>, count: number): Buffer {
  const exporter = new InMemorySpanExporter();
  const tracer = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }).getTracer('test');
  for (let i = 0; i < count; i++) tracer.startSpan(`span ${i}`, { attributes: attributes(i) }).end();
  return serialized(ProtobufTraceSerializer.serializeRequest(exporter.getFinishedSpans()));
}

function decoded(body: Buffer): { attributes: unknown[]; rolloutIds: ColumnValue[] } {
  const { rows } = decoder.decode('traces', 'protobuf', body);
  const column = rows.columns[SPAN.attributes] as ByteColumn;
  const text = (i: number) =>
    Buffer.from(column.data.subarray(column.slices[2 * i], column.slices[2 * i + 1])).toString('utf8');
  return {
    attributes: Array.from({ length: rows.length }, (_, i) => JSON.parse(text(i))),
    rolloutIds: rows.columns[SPAN.rollout_id] as ColumnValue[],
  };
}

test('attributes that repeat, change or move between spans are each read as the span holds them', () => {
  const layouts: ((i: number) => Record<string, string | number>)[] = [
    (i) => ({
      'gen_ai.system': 'openai',
      'agentlightning.rollout_id': `ro-${i % 2}`,
      'gen_ai.response.id': `id-${i}`,
      'gen_ai.request.model': i < 40 ? 'small' : 'large',
    }),
    // The same keys in another order, values that differ in one byte, a key at a new position.
    (i) => ({
      'gen_ai.request.model': 'small',
      'gen_ai.system': i % 3 ? 'openai' : 'openaj',
      tokens: i,
      'agentlightning.rollout_id': 'ro-9',
    }),
    (i) => ({
      'gen_ai.system': 'openai',
      'agentlightning.rollout_id': `ro-${i % 2}`,
      'gen_ai.response.id': `id-${i}`,
      'gen_ai.request.model': 'é'.repeat(i % 3),
    }),
  ];
  for (const layout of [...layouts, ...layouts]) {
    const count = 100;
    const { attributes, rolloutIds } = decoded(request(layout, count));
    assert.deepEqual(
      attributes,
      Array.from({ length: count }, (_, i) => layout(i)),
    );
    assert.deepEqual(
      rolloutIds,
      Array.from({ length: count }, (_, i) => layout(i)['agentlightning.rollout_id']),
      'the rollout is read from every span',
    );
  }
});

// Text values become JSON strings: long ones (prompts) are scanned four bytes at a time, so every
// byte that needs an escape must be found wherever it falls in a word.
test('text of every kind comes back exact from the attributes JSON, short or long, at any offset', () => {
  const specials = [
    ...Array.from({ length: 0x20 }, (_, b) => String.fromCharCode(b)),
    '"',
    '\\',
    '\x7f',
    'é',
    '日本',
    '😀',
    '\u2028',
  ];
  const texts: string[] = ['', 'plain', specials.join('')];
  for (const special of specials) {
    for (const length of [63, 64, 65, 200]) {
      for (const at of [0, 1, 2, 3, 31, length - 1])
        texts.push('x'.repeat(at) + special + 'y'.repeat(Math.max(0, length - at)));
    }
  }
  texts.push('You are a helpful agent.\nSay "hi" \\ then\tstop. '.repeat(100));
  // Each text is the one attribute of a span, preceded by a key of varying length, so that the
  // text starts at every alignment in the request's buffer.
  const { attributes } = decoded(request((i) => ({ ['k'.repeat(1 + (i % 4))]: texts[i] }), texts.length));
  assert.deepEqual(
    attributes,
    texts.map((text, i) => ({ ['k'.repeat(1 + (i % 4))]: text })),
  );
});

test('a string that is not UTF-8 is stored with U+FFFD and counted, short or long, wherever it is', () => {
  for (const length of [10, 300]) {
    const marker = 'M'.repeat(length);
    const body = request(() => ({ prompt: marker }), 3);
    const at = body.indexOf(marker) + length - 2;
    body[at] = 0xff; // a byte no UTF-8 text holds, in the first span's text
    const batch = decoder.decode('traces', 'protobuf', body);
    assert.equal(batch.replacedValues, 1);
    const { attributes } = decoded(body);
    assert.deepEqual(attributes, [
      { prompt: `${'M'.repeat(length - 2)}\ufffdM` },
      { prompt: marker },
      { prompt: marker },
    ]);
  }
  // The span's name, its status message and its scope's name are copied byte for byte as well.
  const exporter = new InMemorySpanExporter();
  const tracer = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }).getTracer('scope-XQ');
  const span = tracer.startSpan('name-XQ');
  span.setStatus({ code: 2, message: 'status-XQ' });
  span.end();
  const body = serialized(ProtobufTraceSerializer.serializeRequest(exporter.getFinishedSpans()));
  for (let at = body.indexOf('-XQ'); at >= 0; at = body.indexOf('-XQ', at + 1)) body[at] = 0xc3; // a lead byte cut short
  const { rows, replacedValues } = decoder.decode('traces', 'protobuf', body);
  assert.equal(replacedValues, 3);
  const text = (column: number) => {
    const c = rows.columns[column] as ByteColumn;
    return Buffer.from(c.data.subarray(c.slices[0], c.slices[1])).toString('utf8');
  };
  assert.deepEqual(
    [text(SPAN.name), text(SPAN.status_message), text(SPAN.scope_name)],
    ['name\ufffdXQ', 'status\ufffdXQ', 'scope\ufffdXQ'],
  );
});
