import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { SeverityNumber } from '@opentelemetry/api-logs';
import {
  JsonLogsSerializer,
  JsonTraceSerializer,
  ProtobufLogsSerializer,
  ProtobufTraceSerializer,
} from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemoryLogRecordExporter, LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import fc from 'fast-check';
import { FIXTURES } from '../support/helpers.js';
import { serialized } from '../support/otlp-batches.js';
import {
  anyValueArb,
  jsonBytes,
  logArb,
  RawBytes,
  RawJson,
  requestArb,
  requestJson,
  requestProtobuf,
  spanArb,
  strArb,
} from './otlp-model.js';
import type { FuzzRequest } from './server.js';

type Signal = 'traces' | 'logs';

/** Request bodies to mutate: the independent fixtures and what the real OTel exporters send. */
export interface OtlpSeeds {
  readonly protobuf: Record<Signal, Buffer[]>;
  readonly json: Record<Signal, unknown[]>;
}

/** Spans and log records made with the SDK, with fixed ids and times so that every run sends the same bytes. */
export async function loadSeeds(): Promise<OtlpSeeds> {
  let id = 0;
  const idGenerator = {
    generateTraceId: () => (++id).toString(16).padStart(32, '0'),
    generateSpanId: () => (++id).toString(16).padStart(16, '0'),
  };
  const resource = resourceFromAttributes({
    'service.name': 'agl-fuzz',
    'agentlightning.rollout_id': 'ro-fuzz',
    'agentlightning.attempt_id': 'at-fuzz',
  });
  const spanExporter = new InMemorySpanExporter();
  const tracerProvider = new TracerProvider({
    resource,
    idGenerator,
    spanProcessors: [new SimpleSpanProcessor({ exporter: spanExporter })],
  });
  const tracer = tracerProvider.getTracer('agl-fuzz', '1.0.0');
  const at = (ms: number) => new Date(1_700_000_000_000 + ms);
  const root = tracer.startSpan('agent', {
    startTime: at(0),
    attributes: { 'agentlightning.operation.input': '{"q":"2+2"}' },
  });
  const call = tracer.startSpan('openai.chat', {
    startTime: at(1),
    attributes: {
      'gen_ai.system': 'openai',
      'gen_ai.request.model': 'gpt-4o-mini',
      'gen_ai.prompt.0.role': 'user',
      'gen_ai.prompt.0.content': 'What is 2+2?',
      'gen_ai.completion.0.role': 'assistant',
      'gen_ai.completion.0.content': '4',
      'gen_ai.usage.input_tokens': 12,
      'gen_ai.response.finish_reasons': ['stop'],
      prompt_token_ids: [1, 2, 3],
      response_token_ids: [4],
    },
  });
  call.addEvent('chunk', { index: 0 }, at(2));
  call.end(at(3));
  const reward = tracer.startSpan('agentlightning.annotation', {
    startTime: at(4),
    attributes: { 'agentlightning.reward.0.name': 'primary', 'agentlightning.reward.0.value': 1 },
  });
  reward.end(at(5));
  root.end(at(6));
  await tracerProvider.forceFlush();
  const spans = spanExporter.getFinishedSpans();

  const logExporter = new InMemoryLogRecordExporter();
  const loggerProvider = new LoggerProvider({
    resource,
    processors: [new SimpleLogRecordProcessor({ exporter: logExporter })],
  });
  const logger = loggerProvider.getLogger('agl-fuzz');
  const spanContext = call.spanContext();
  for (const [eventName, body] of [
    ['gen_ai.user.message', { content: 'What is 2+2?' }],
    ['gen_ai.choice', { index: 0, finish_reason: 'stop', message: { content: '4' } }],
  ] as const) {
    logger.emit({
      eventName,
      body,
      timestamp: at(7),
      severityNumber: SeverityNumber.INFO,
      attributes: { 'gen_ai.system': 'openai', 'event.name': eventName },
      context: undefined,
    });
  }
  await loggerProvider.forceFlush();
  const logs = logExporter.getFinishedLogRecords().map((log) => Object.assign(log, { spanContext }));
  await tracerProvider.shutdown();
  await loggerProvider.shutdown();

  const decoder = new TextDecoder();
  return {
    protobuf: {
      traces: [
        await readFile(join(FIXTURES, 'traces.pb')),
        serialized(ProtobufTraceSerializer.serializeRequest(spans)),
      ],
      logs: [await readFile(join(FIXTURES, 'logs.pb')), serialized(ProtobufLogsSerializer.serializeRequest(logs))],
    },
    json: {
      traces: [JSON.parse(decoder.decode(serialized(JsonTraceSerializer.serializeRequest(spans))))],
      logs: [JSON.parse(decoder.decode(serialized(JsonLogsSerializer.serializeRequest(logs))))],
    },
  };
}

// ---------------------------------------------------------------- byte-level mutations

type ByteMutation =
  | { readonly op: 'flip'; readonly at: number; readonly mask: number }
  | { readonly op: 'truncate'; readonly at: number }
  | { readonly op: 'delete'; readonly at: number; readonly length: number }
  | { readonly op: 'insert'; readonly at: number; readonly bytes: Uint8Array }
  | {
      readonly op: 'splice';
      readonly at: number;
      readonly from: number;
      readonly start: number;
      readonly length: number;
    };

/** Positions are drawn as integers and taken modulo the body's length, so that they shrink to the start. */
const byteMutationArb: fc.Arbitrary<ByteMutation> = fc.oneof(
  fc.record({ op: fc.constant('flip' as const), at: fc.nat(), mask: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 64 }) }),
  fc.record({
    op: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }),
  }),
  fc.record({
    op: fc.constant('splice' as const),
    at: fc.nat(),
    from: fc.nat(),
    start: fc.nat(),
    length: fc.integer({ min: 1, max: 256 }),
  }),
);

function mutateBytes(body: Buffer, mutation: ByteMutation, others: Buffer[]): Buffer {
  const at = body.length === 0 ? 0 : mutation.at % (body.length + 1);
  switch (mutation.op) {
    case 'flip': {
      if (body.length === 0) return body;
      const copy = Buffer.from(body);
      copy[at % body.length] ^= mutation.mask;
      return copy;
    }
    case 'truncate':
      return body.subarray(0, at);
    case 'delete':
      return Buffer.concat([body.subarray(0, at), body.subarray(at + mutation.length)]);
    case 'insert':
      return Buffer.concat([body.subarray(0, at), mutation.bytes, body.subarray(at)]);
    case 'splice': {
      const other = others[mutation.from % others.length];
      const start = mutation.start % Math.max(1, other.length);
      return Buffer.concat([body.subarray(0, at), other.subarray(start, start + mutation.length), body.subarray(at)]);
    }
  }
}

// ---------------------------------------------------------------- OTLP requests

const PROTOBUF_TYPES = [
  'application/x-protobuf',
  'application/x-protobuf',
  'application/x-protobuf',
  'application/protobuf',
  'application/json',
  'text/plain',
  '',
];
const JSON_TYPES = [
  'application/json',
  'application/json',
  'application/json',
  'application/json; charset=utf-8',
  'application/x-protobuf',
  'text/plain',
];

interface Encoded {
  readonly signal: Signal;
  readonly body: Buffer;
  readonly gzip: boolean;
  readonly contentType: string;
  /** How the body was made, written when a report needs it. */
  readonly label: () => string;
}

const toRequest = ({ signal, body, gzip, contentType }: Encoded): FuzzRequest => ({
  method: 'POST',
  path: `/v1/${signal}`,
  headers: { ...(contentType ? { 'content-type': contentType } : {}), ...(gzip ? { 'content-encoding': 'gzip' } : {}) },
  body: gzip ? gzipSync(body) : body,
});

const signalArb = fc.constantFrom<Signal>('traces', 'logs');
const modelArb = (signal: Signal) => requestArb<unknown>(signal === 'traces' ? spanArb : logArb);

/** Mutated OTLP protobuf requests: a seed or a generated request, then flips, cuts and splices. */
export function protobufRequests(seeds: OtlpSeeds): fc.Arbitrary<FuzzRequest & { describe(): string }> {
  return signalArb.chain((signal) => {
    const bodies = seeds.protobuf[signal];
    const base = fc.oneof(
      fc.nat({ max: bodies.length - 1 }).map((i) => ({ body: bodies[i], label: () => `seed ${signal}[${i}]` })),
      modelArb(signal).map((model) => ({
        body: requestProtobuf(model, signal),
        label: () => `generated ${show(model)}`,
      })),
    );
    return fc
      .record({
        base,
        // Half the requests go unmutated, so that generated odd values reach the store.
        mutations: fc.oneof(fc.constant<ByteMutation[]>([]), fc.array(byteMutationArb, { minLength: 1, maxLength: 3 })),
        gzip: fc.boolean(),
        contentType: fc.constantFrom(...PROTOBUF_TYPES),
      })
      .map(({ base, mutations, gzip, contentType }) => {
        const body = mutations.reduce((body, mutation) => mutateBytes(body, mutation, bodies), base.body);
        return describe({
          signal,
          body,
          gzip,
          contentType,
          label: () => `${base.label()}; mutations ${show(mutations)}`,
        });
      });
  });
}

// ---------------------------------------------------------------- JSON-level mutations

type JsonMutation =
  | { readonly op: 'replace'; readonly at: number; readonly value: unknown }
  | { readonly op: 'delete'; readonly at: number }
  | { readonly op: 'deepen'; readonly at: number; readonly depth: number }
  | { readonly op: 'truncate'; readonly at: number };

const oddJsonValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  strArb.map((str) => str.filter((piece): piece is string => typeof piece === 'string').join('')),
  fc.constantFrom('\ud800', 'a\udc00b', '\u0000', '\uffff', '', '-1', '1e999', 'NaN', 'Infinity', '0x10', 'ZZZZ'),
  fc
    .constantFrom('1e400', '-1e400', '123456789012345678901234567890', '18446744073709551616', '-0', '1.5e-400')
    .map((n) => new RawJson(n)),
  fc.constantFrom(null, true, [], {}, 0, -1, 2 ** 53 + 1),
  // Nesting as text, past any recursive parser's stack (JSON.stringify could not write it).
  fc.constantFrom(100_000).map((n) => new RawJson(`${'['.repeat(n)}${']'.repeat(n)}`)),
  anyValueArb.map((value) => requestJson({ resource: [{ key: ['k'], value }], scopeName: [], items: [] }, 'traces')),
);

const jsonMutationArb: fc.Arbitrary<JsonMutation> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('replace' as const), at: fc.nat(), value: oddJsonValue }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('delete' as const), at: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('deepen' as const),
      at: fc.nat(),
      depth: fc.constantFrom(10, 65, 1_000, 5_000),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }) },
);

interface Slot {
  readonly parent: Record<string, unknown> | unknown[];
  readonly key: string | number;
}

/** Every place in `value` that holds a value, in a fixed order. */
function slots(value: unknown): Slot[] {
  const found: Slot[] = [];
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (node === null || typeof node !== 'object' || node instanceof RawJson || node instanceof RawBytes) continue;
    const entries: [string | number, unknown][] = Array.isArray(node)
      ? node.map((child, i) => [i, child])
      : Object.entries(node);
    for (const [key, child] of entries) {
      found.push({ parent: node as Slot['parent'], key });
      stack.push(child);
    }
  }
  return found;
}

/** A copy of plain objects and arrays (RawJson and RawBytes are shared), without recursion. */
function cloneJson(value: unknown): unknown {
  const root: Record<string, unknown> = { value };
  const stack: Slot[] = [{ parent: root, key: 'value' }];
  for (let slot = stack.pop(); slot !== undefined; slot = stack.pop()) {
    const { parent, key } = slot;
    const node = (parent as Record<string | number, unknown>)[key];
    if (node === null || typeof node !== 'object' || node instanceof RawJson || node instanceof RawBytes) continue;
    const copy: Slot['parent'] = Array.isArray(node) ? [...node] : { ...node };
    (parent as Record<string | number, unknown>)[key] = copy;
    for (const childKey of Array.isArray(copy) ? copy.keys() : Object.keys(copy))
      stack.push({ parent: copy, key: childKey });
  }
  return root.value;
}

function deepArray(depth: number, leaf: unknown): unknown {
  let value = leaf;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

/** Applies the value-level mutations to a copy of `json`; a 'truncate' cuts the text afterwards. */
function mutateJson(json: unknown, mutations: readonly JsonMutation[]): Buffer {
  const root = { value: cloneJson(json) };
  let cut: number | undefined;
  for (const mutation of mutations) {
    if (mutation.op === 'truncate') {
      cut = mutation.at;
      continue;
    }
    const all = slots(root);
    if (all.length === 0) break; // an earlier mutation deleted the whole request
    const { parent, key } = all[mutation.at % all.length];
    const old = (parent as Record<string | number, unknown>)[key];
    if (mutation.op === 'replace') (parent as Record<string | number, unknown>)[key] = mutation.value;
    else if (mutation.op === 'deepen')
      (parent as Record<string | number, unknown>)[key] = deepArray(mutation.depth, old);
    else if (Array.isArray(parent)) parent.splice(Number(key), 1);
    else delete parent[key];
  }
  const body = jsonBytes(root.value);
  return cut === undefined ? body : body.subarray(0, cut % (body.length + 1));
}

/** Mutated OTLP/JSON requests: the SDK's JSON or a generated request, then values replaced, removed, nested deeper. */
export function jsonRequests(seeds: OtlpSeeds): fc.Arbitrary<FuzzRequest & { describe(): string }> {
  return signalArb.chain((signal) => {
    const bodies = seeds.json[signal];
    const base = fc.oneof(
      fc.nat({ max: bodies.length - 1 }).map((i) => ({ json: bodies[i], label: () => `seed ${signal}[${i}]` })),
      modelArb(signal).map((model) => ({ json: requestJson(model, signal), label: () => `generated ${show(model)}` })),
    );
    return fc
      .record({
        base,
        mutations: fc.oneof(fc.constant<JsonMutation[]>([]), fc.array(jsonMutationArb, { minLength: 1, maxLength: 3 })),
        gzip: fc.boolean(),
        contentType: fc.constantFrom(...JSON_TYPES),
      })
      .map(({ base, mutations, gzip, contentType }) =>
        describe({
          signal,
          body: mutateJson(base.json, mutations),
          gzip,
          contentType,
          label: () => `${base.label()}; mutations ${show(mutations)}`,
        }),
      );
  });
}

/** A case's parts as JSON with bigints, bytes and long strings written short, cut when long (deep values are). */
function show(value: unknown): string {
  const text = jsonBytes(value, (item) => {
    if (typeof item === 'bigint') return `${item}n`;
    if (item instanceof Uint8Array) return `bytes(${Buffer.from(item).toString('hex')})`;
    if (item instanceof RawJson)
      return `raw(${item.text.length > 40 ? `${item.text.slice(0, 20)}... (${item.text.length} chars)` : item.text})`;
    if (typeof item === 'string' && item.length > 200) return `${item.slice(0, 20)}... (${item.length} chars)`;
    return item;
  }).toString('utf8');
  return text.length > 2500 ? `${text.slice(0, 2000)} ...(${text.length} chars in all)... ${text.slice(-400)}` : text;
}

/** A request whose fast-check report names how it was made and shows its body's start. */
function describe(encoded: Encoded): FuzzRequest & { describe(): string } {
  const request = toRequest(encoded);
  const text = () => {
    const head = encoded.body.subarray(0, 300);
    return (
      `${request.method} ${request.path} ${JSON.stringify(request.headers)} body ${encoded.body.length} bytes ` +
      `(${encoded.label()}); body starts ${JSON.stringify(head.toString('latin1'))}`
    );
  };
  return Object.assign(request, { describe: text, toString: text, [fc.toStringMethod]: text });
}
