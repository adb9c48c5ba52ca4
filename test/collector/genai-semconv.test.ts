import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, trace, type Attributes, type AttributeValue } from '@opentelemetry/api';
import type { AnyValueMap } from '@opentelemetry/api-logs';
import { OTLPLogExporter as JsonLogExporter } from '@opentelemetry/exporter-logs-otlp-http';
import { OTLPLogExporter as ProtoLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { GENAI_ATTRIBUTES_READ } from '../../src/sql/derived.js';
import { GENAI } from '../../src/api/semconv.js';
import { FIXTURES, json, newTempDir, queryRows, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';

// OpenTelemetry's GenAI conventions as their own repository states them: every worked example
// and valid test document (test/fixtures/genai-semconv, each file names its source), sent by the
// official SDK and OTLP exporters, as protobuf and as JSON, in each of the three forms content
// comes in: span attributes, a span event, log records tied to the span by trace and span id.

const SEMCONV = join(FIXTURES, 'genai-semconv');
const FORMS = ['attributes', 'span event', 'log record'] as const;
const ENCODINGS = ['protobuf', 'json'] as const;
type Form = (typeof FORMS)[number];
type Encoding = (typeof ENCODINGS)[number];

interface Example {
  readonly file: string;
  readonly span_name?: string;
  readonly span_attributes: Record<string, AttributeValue>;
  /** The example's operation.details event, when it shows one: its documents join the span's. */
  readonly event?: { attributes: Record<string, unknown> };
  /** The llm_calls row's columns this example must give; null: it is no LLM call (a tool's span). */
  readonly expected: Record<string, unknown> | null;
}

const ROW_COLUMNS = [
  'provider',
  'model',
  'input_messages',
  'output_messages',
  'tools',
  'input_tokens',
  'output_tokens',
  'response_id',
  'finish_reason',
  'parameters',
  'extra_parts',
] as const;

let dir: string;
let agl: InProcessAgl;
const pipelines: { tracers: TracerProvider; loggers: LoggerProvider }[] = [];
/** Which trace each example was sent in, by form and encoding. */
const sent = new Map<string, string>();
let examples: Example[];

function pipeline(encoding: Encoding) {
  const resource = resourceFromAttributes({ 'service.name': `genai-${encoding}` });
  const traces = `${agl.url}/v1/traces`;
  const logs = `${agl.url}/v1/logs`;
  const tracers = new TracerProvider({
    resource,
    spanProcessors: [
      new SimpleSpanProcessor({
        exporter:
          encoding === 'json' ? new JsonTraceExporter({ url: traces }) : new ProtoTraceExporter({ url: traces }),
      }),
    ],
  });
  const loggers = new LoggerProvider({
    resource,
    processors: [
      new SimpleLogRecordProcessor({
        exporter: encoding === 'json' ? new JsonLogExporter({ url: logs }) : new ProtoLogExporter({ url: logs }),
      }),
    ],
  });
  pipelines.push({ tracers, loggers });
  return { tracers, loggers };
}

const DOCUMENT_KEYS: string[] = [
  GENAI.inputMessages,
  GENAI.outputMessages,
  GENAI.systemInstructions,
  GENAI.toolDefinitions,
];

/** The span attributes without the documents, and the documents. */
function split(attributes: Record<string, AttributeValue>): [Attributes, Record<string, AttributeValue>] {
  const rest: Attributes = {};
  const documents: Record<string, AttributeValue> = {};
  for (const [key, value] of Object.entries(attributes)) (DOCUMENT_KEYS.includes(key) ? documents : rest)[key] = value;
  return [rest, documents];
}

/** A document as a structured value, as instrumentations put it on a log record (text that is no JSON stays text). */
function structured(value: AttributeValue): unknown {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

/** Sends one example in one form and encoding; returns its trace id. */
async function send(example: Example, form: Form, encoding: Encoding): Promise<string> {
  const { tracers, loggers } = pipeline(encoding);
  const [rest, documents] = split(example.span_attributes);
  for (const key of DOCUMENT_KEYS) {
    const value = example.event?.attributes[key];
    if (value !== undefined) documents[key] = JSON.stringify(value);
  }
  const span = tracers
    .getTracer('genai-semconv-test')
    .startSpan(
      example.span_name ?? 'chat',
      { kind: SpanKind.CLIENT, attributes: form === 'attributes' ? { ...rest, ...documents } : rest },
      ROOT_CONTEXT,
    );
  const content = Object.keys(documents).length > 0;
  if (form === 'span event' && content) span.addEvent(GENAI.operationDetails, documents);
  if (form === 'log record' && content) {
    // As @opentelemetry/instrumentation-openai emits them: the input when the call starts, the
    // output when it ends, each a record of its own.
    const logger = loggers.getLogger('genai-semconv-test');
    const context = trace.setSpan(ROOT_CONTEXT, span);
    const { [GENAI.outputMessages]: output, ...request } = documents;
    const records = [request, output === undefined ? {} : { [GENAI.outputMessages]: output }];
    for (const record of records.filter((r) => Object.keys(r).length > 0))
      logger.emit({
        eventName: GENAI.operationDetails,
        context,
        attributes: Object.fromEntries(Object.entries(record).map(([k, v]) => [k, structured(v)])) as AnyValueMap,
      });
  }
  span.end();
  // The records first for one encoding, the span first for the other: the order must not matter.
  if (encoding === 'protobuf') {
    await loggers.forceFlush();
    await tracers.forceFlush();
  } else {
    await tracers.forceFlush();
    await loggers.forceFlush();
  }
  return span.spanContext().traceId;
}

async function loadExamples(): Promise<Example[]> {
  const folder = join(SEMCONV, 'examples');
  const files = (await readdir(folder)).filter((f) => f.endsWith('.json')).sort();
  return Promise.all(
    files.map(async (file) => ({
      file,
      ...(JSON.parse(await readFile(join(folder, file), 'utf8')) as Omit<Example, 'file'>),
    })),
  );
}

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'genai.duckdb'), { deriveWhenIdleMs: Infinity });
  examples = await loadExamples();
  for (const example of examples)
    for (const form of FORMS)
      for (const encoding of ENCODINGS)
        sent.set(`${example.file}|${form}|${encoding}`, await send(example, form, encoding));
});
after(async () => {
  for (const { tracers, loggers } of pipelines) {
    await tracers.shutdown();
    await loggers.shutdown();
  }
  await agl.close();
  await removeDir(dir);
});

/** The llm_calls row of a trace, its compared columns with JSON parsed; null when it has none. */
async function rowOf(traceId: string): Promise<Record<string, unknown> | null> {
  const rows = await queryRows(
    agl.store,
    `SELECT ${ROW_COLUMNS.join(', ')} FROM llm_calls WHERE trace_id = '${traceId}'`,
  );
  assert.ok(rows.length <= 1, `one llm_calls row for trace ${traceId}, not ${rows.length}`);
  const row = rows[0];
  if (row === undefined) return null;
  return Object.fromEntries(
    ROW_COLUMNS.map((column) => {
      const value = row[column];
      const parsed = typeof value === 'string' && /messages|tools|parameters|parts/.test(column) ? json(value) : value;
      return [column, typeof parsed === 'bigint' ? Number(parsed) : parsed];
    }),
  );
}

test('every worked example gives its llm_calls row, whatever the form and encoding, before and after the deriver', async (t) => {
  assert.ok(examples.length >= 5, `the worked examples are in ${SEMCONV}/examples`);
  for (const derived of [false, true]) {
    if (derived) await agl.store.deriveAll();
    for (const example of examples)
      for (const form of FORMS)
        for (const encoding of ENCODINGS) {
          const row = await rowOf(sent.get(`${example.file}|${form}|${encoding}`) as string);
          const wanted = example.expected;
          const expected = wanted && Object.fromEntries(ROW_COLUMNS.map((c) => [c, wanted[c] ?? null]));
          assert.deepEqual(row, expected, `${example.file}, ${form}, ${encoding}${derived ? ', derived' : ''}`);
        }
  }
  t.diagnostic(`${examples.length} examples x ${FORMS.length} forms x ${ENCODINGS.length} encodings`);
});

/** The test documents of the conventions' own suite, valid or invalid. */
async function cases(kind: 'valid' | 'invalid'): Promise<{ file: string; schema: string; document: unknown }[]> {
  const folder = join(SEMCONV, 'cases', kind);
  const files = (await readdir(folder)).filter((f) => f.endsWith('.json')).sort();
  return Promise.all(files.map(async (file) => ({ file, ...JSON.parse(await readFile(join(folder, file), 'utf8')) })));
}

/** Where each schema's document goes on a call: the attribute, or the tool call part that holds it. */
function callWith(schema: string, document: unknown): Record<string, AttributeValue> {
  const text = typeof document === 'string' ? document : JSON.stringify(document);
  const attribute = {
    input: GENAI.inputMessages,
    output: GENAI.outputMessages,
    system_instructions: GENAI.systemInstructions,
    tool_definitions: GENAI.toolDefinitions,
  }[schema];
  if (attribute) return { [attribute]: text };
  // Tool call arguments and results, retrieval documents, memory records: inside a message.
  const part =
    schema === 'tool_call_result'
      ? { type: 'tool_call_response', id: 'c1', response: document }
      : { type: 'tool_call', id: 'c1', name: schema, arguments: document };
  return { [GENAI.inputMessages]: JSON.stringify([{ role: 'assistant', parts: [part] }]) };
}

test("every test document of the conventions' suite, valid or not, is stored and every view still reads", async () => {
  const all = [...(await cases('valid')), ...(await cases('invalid'))];
  assert.ok(all.length >= 20);
  const traces: string[] = [];
  for (const { file, schema, document } of all) {
    const attributes = {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      ...callWith(schema, document),
    };
    for (const form of ['attributes', 'log record'] as const)
      traces.push(
        await send({ file, span_name: `chat ${file}`, span_attributes: attributes, expected: null }, form, 'protobuf'),
      );
  }
  for (const derived of [false, true]) {
    if (derived) await agl.store.deriveAll();
    const ids = traces.map((id) => `'${id}'`).join(', ');
    const calls = await queryRows(agl.store, `SELECT trace_id FROM llm_calls WHERE trace_id IN (${ids})`);
    // Each is a call whatever its content: invalid parts are kept in extra_parts, never fail a read.
    assert.equal(calls.length, traces.length, derived ? 'derived' : 'not derived yet');
    for (const view of ['rewards', 'spans', 'logs', 'prompt_versions', 'training_steps'])
      await queryRows(agl.store, `SELECT count(*) AS n FROM ${view}`);
  }
  const answer = await fetch(`${agl.url}/v1/traces`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"resourceSpans":[]}',
  });
  assert.equal(answer.status, 200);
});

test('an unknown part is kept in extra_parts, where it was', async () => {
  const unknown = { type: 'vendor_citation', source: 'doc-7', span: [3, 9] };
  const traceId = await send(
    {
      file: 'unknown-part',
      span_name: 'chat unknown',
      span_attributes: {
        'gen_ai.operation.name': 'chat',
        [GENAI.outputMessages]: JSON.stringify([
          { role: 'assistant', parts: [{ type: 'text', content: 'see doc 7' }, unknown, 42], finish_reason: 'stop' },
        ]),
      },
      expected: null,
    },
    'attributes',
    'json',
  );
  const row = await rowOf(traceId);
  assert.deepEqual(row?.output_messages, [{ role: 'assistant', content: 'see doc 7' }]);
  assert.deepEqual(row?.extra_parts, [
    { in: 'output', message: 0, part: unknown },
    { in: 'output', message: 0, part: 42 },
  ]);
});

test('the coverage of the inference attributes the reference scenarios list', async (t) => {
  const reference = JSON.parse(await readFile(join(SEMCONV, 'inference-attributes.json'), 'utf8')) as {
    attributes: string[];
  };
  const listed = reference.attributes.filter((key) => key.startsWith('gen_ai.'));
  const read = listed.filter((key) => GENAI_ATTRIBUTES_READ.includes(key));
  t.diagnostic(`GenAI inference attributes read: ${read.length} of ${listed.length} the reference scenarios list`);
  t.diagnostic(`not read: ${listed.filter((key) => !read.includes(key)).join(', ')}`);
  const core = [
    'gen_ai.request.model',
    'gen_ai.response.model',
    'gen_ai.provider.name',
    'gen_ai.input.messages',
    'gen_ai.output.messages',
    'gen_ai.system_instructions',
    'gen_ai.tool.definitions',
    'gen_ai.usage.input_tokens',
    'gen_ai.usage.output_tokens',
    'gen_ai.response.finish_reasons',
    'gen_ai.response.id',
    'gen_ai.request.temperature',
    'gen_ai.request.max_tokens',
    'gen_ai.request.top_p',
  ];
  assert.deepEqual(
    core.filter((key) => !GENAI_ATTRIBUTES_READ.includes(key)),
    [],
  );
});
