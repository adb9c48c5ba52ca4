import fc from 'fast-check';

// A small model of OTLP requests whose strings may hold bytes no JS string can (invalid UTF-8),
// encoded by hand to protobuf and to OTLP/JSON: the SDK's serializers only write what its API
// accepts, and the fuzz needs what an odd or broken exporter sends.

/** A string as pieces: JS text (lone surrogates included) or raw bytes (invalid UTF-8 included). */
export type Str = readonly (string | Uint8Array)[];

export type AnyValue =
  | { readonly kind: 'string'; readonly value: Str }
  | { readonly kind: 'bool'; readonly value: boolean }
  | { readonly kind: 'int'; readonly value: bigint }
  | { readonly kind: 'double'; readonly value: number }
  | { readonly kind: 'bytes'; readonly value: Uint8Array }
  | { readonly kind: 'array'; readonly values: readonly AnyValue[] }
  | { readonly kind: 'kvlist'; readonly values: readonly KeyValue[] }
  /** `depth` levels of arrays or kvlists around `leaf`, built without recursion. */
  | { readonly kind: 'deep'; readonly shape: 'array' | 'kvlist'; readonly depth: number; readonly leaf: AnyValue };

export interface KeyValue {
  readonly key: Str;
  readonly value: AnyValue;
}

export interface SpanModel {
  readonly traceId: Uint8Array;
  readonly spanId: Uint8Array;
  readonly parentId: Uint8Array | null;
  readonly name: Str;
  readonly kind: number;
  readonly start: bigint;
  readonly end: bigint;
  readonly attributes: readonly KeyValue[];
  readonly events: readonly { readonly name: Str; readonly time: bigint; readonly attributes: readonly KeyValue[] }[];
  readonly statusCode: number;
  readonly statusMessage: Str;
}

export interface LogModel {
  readonly time: bigint;
  readonly severity: number;
  readonly eventName: Str;
  readonly body: AnyValue | null;
  readonly attributes: readonly KeyValue[];
  readonly traceId: Uint8Array | null;
  readonly spanId: Uint8Array | null;
}

export interface RequestModel<Item> {
  readonly resource: readonly KeyValue[];
  readonly scopeName: Str;
  readonly items: readonly Item[];
}

// ---------------------------------------------------------------- generators

/** Pieces that decoders and JSON readers trip over. */
const ODD_TEXT = [
  '\ud800',
  '\udfff',
  '\udc00\ud800',
  '\u0000',
  '\uffff',
  '\ufffe',
  '\u2028',
  '"\\',
  '\u{1F600}',
  '\u00e9',
  '\x7f',
];
/** Byte sequences that are not UTF-8: lone continuation, truncated, overlong, CESU surrogate, out of range. */
const BAD_UTF8 = [
  [0x80],
  [0xc3],
  [0xe2, 0x82],
  [0xc0, 0xaf],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xff],
  [0xfe, 0xff],
];

const plainText = fc.string({ maxLength: 12 });
export const strArb: fc.Arbitrary<Str> = fc.array(
  fc.oneof(
    { weight: 4, arbitrary: plainText },
    { weight: 2, arbitrary: fc.constantFrom(...ODD_TEXT) },
    { weight: 2, arbitrary: fc.constantFrom(...BAD_UTF8).map((bytes) => Uint8Array.from(bytes)) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 8 }) },
    { weight: 1, arbitrary: fc.constantFrom(1_000, 70_000, 300_000).map((n) => 'x'.repeat(n)) },
  ),
  { maxLength: 4 },
);

/** Strings that are plain text most of the time, so that most requests reach the store. */
const mostlyPlain: fc.Arbitrary<Str> = fc.oneof(
  { weight: 3, arbitrary: plainText.map((s) => [s]) },
  { weight: 1, arbitrary: strArb },
);

const leafArb: fc.Arbitrary<AnyValue> = fc.oneof(
  strArb.map((value) => ({ kind: 'string' as const, value })),
  fc.boolean().map((value) => ({ kind: 'bool' as const, value })),
  fc
    .oneof(
      fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
      fc.constantFrom(0n, -1n, 2n ** 63n - 1n, -(2n ** 63n)),
    )
    .map((value) => ({ kind: 'int' as const, value })),
  fc
    .oneof(fc.double(), fc.constantFrom(Number.NaN, Infinity, -Infinity, -0, 1e308, 5e-324))
    .map((value) => ({ kind: 'double' as const, value })),
  fc.uint8Array({ maxLength: 16 }).map((value) => ({ kind: 'bytes' as const, value })),
);

const { value: treeArb } = fc.letrec<{ value: AnyValue }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leafArb,
    fc.array(tie('value'), { maxLength: 3 }).map((values) => ({ kind: 'array' as const, values })),
    fc
      .array(fc.record({ key: mostlyPlain, value: tie('value') }), { maxLength: 3 })
      .map((values) => ({ kind: 'kvlist' as const, values })),
  ),
}));

/** Depths around the store's limit (64) and far past it. */
const deepArb: fc.Arbitrary<AnyValue> = fc
  .record({
    shape: fc.constantFrom('array' as const, 'kvlist' as const),
    depth: fc.oneof(
      fc.integer({ min: 1, max: 8 }),
      fc.integer({ min: 60, max: 70 }),
      fc.constantFrom(200, 2_000, 5_000),
    ),
    leaf: leafArb,
  })
  .map((deep) => ({ kind: 'deep' as const, ...deep }));

export const anyValueArb: fc.Arbitrary<AnyValue> = fc.oneof(
  { weight: 4, arbitrary: treeArb },
  { weight: 1, arbitrary: deepArb },
);

/** Mostly the attributes agl reads (GenAI, Agent Lightning), some random. */
const KNOWN_KEYS = [
  'gen_ai.system',
  'gen_ai.request.model',
  'gen_ai.response.model',
  'gen_ai.prompt',
  'gen_ai.completion',
  'gen_ai.prompt.0.role',
  'gen_ai.prompt.0.content',
  'gen_ai.completion.0.content',
  'gen_ai.input.messages',
  'gen_ai.output.messages',
  'gen_ai.usage.input_tokens',
  'gen_ai.response.id',
  'gen_ai.response.finish_reasons',
  'agentlightning.rollout_id',
  'agentlightning.attempt_id',
  'agentlightning.reward',
  'agentlightning.reward.0.value',
  'agentlightning.operation.input',
  'agentlightning.operation.output',
  'prompt_token_ids',
  'response_token_ids',
  'service.name',
];
const keyArb: fc.Arbitrary<Str> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...KNOWN_KEYS).map((k) => [k]) },
  { weight: 1, arbitrary: strArb },
);
const attributesArb = fc.array(fc.record({ key: keyArb, value: anyValueArb }), { maxLength: 4 });

const idArb = (bytes: number) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.uint8Array({ minLength: bytes, maxLength: bytes }) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: bytes * 2 }) },
  );
const timeArb = fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.constant(1_700_000_000_000_000_000n));

export const spanArb: fc.Arbitrary<SpanModel> = fc.record({
  traceId: idArb(16),
  spanId: idArb(8),
  parentId: fc.option(idArb(8)),
  name: mostlyPlain,
  kind: fc.integer({ min: -1, max: 7 }),
  start: timeArb,
  end: timeArb,
  attributes: attributesArb,
  events: fc.array(fc.record({ name: mostlyPlain, time: timeArb, attributes: attributesArb }), { maxLength: 2 }),
  statusCode: fc.integer({ min: -1, max: 3 }),
  statusMessage: mostlyPlain,
});

export const logArb: fc.Arbitrary<LogModel> = fc.record({
  time: timeArb,
  severity: fc.integer({ min: -1, max: 25 }),
  eventName: fc.oneof(
    fc.constantFrom(['gen_ai.user.message'], ['gen_ai.choice'], ['gen_ai.system.message']),
    mostlyPlain,
  ),
  body: fc.option(anyValueArb),
  attributes: attributesArb,
  traceId: fc.option(idArb(16)),
  spanId: fc.option(idArb(8)),
});

export const requestArb = <Item>(item: fc.Arbitrary<Item>): fc.Arbitrary<RequestModel<Item>> =>
  fc.record({ resource: attributesArb, scopeName: mostlyPlain, items: fc.array(item, { minLength: 1, maxLength: 3 }) });

// ---------------------------------------------------------------- protobuf

const encoder = new TextEncoder();

/** The UTF-8 of a Str; lone surrogates become the three bytes a careless encoder writes (CESU-8). */
export function strBytes(str: Str): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const piece of str) {
    if (typeof piece !== 'string') {
      parts.push(piece);
      continue;
    }
    // Well-formed runs as UTF-8; each lone surrogate as the bytes of its code unit.
    for (const run of piece.split(/([\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff])/)) {
      const code = run.charCodeAt(0);
      const lone = run.length === 1 && code >= 0xd800 && code <= 0xdfff;
      parts.push(
        lone
          ? Uint8Array.of(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f))
          : encoder.encode(run),
      );
    }
  }
  return Buffer.concat(parts);
}

function varint(value: bigint): Uint8Array {
  let v = BigInt.asUintN(64, value);
  const out: number[] = [];
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Uint8Array.from(out);
}

const tag = (field: number, wire: number) => varint(BigInt((field << 3) | wire));
const lengthDelimited = (field: number, bytes: Uint8Array) =>
  Buffer.concat([tag(field, 2), varint(BigInt(bytes.length)), bytes]);
const varintField = (field: number, value: bigint) => Buffer.concat([tag(field, 0), varint(value)]);
function fixed64(field: number, value: bigint): Uint8Array {
  const bytes = Buffer.alloc(8);
  bytes.writeBigUInt64LE(BigInt.asUintN(64, value));
  return Buffer.concat([tag(field, 1), bytes]);
}
function double(field: number, value: number): Uint8Array {
  const bytes = Buffer.alloc(8);
  bytes.writeDoubleLE(value);
  return Buffer.concat([tag(field, 1), bytes]);
}
const messages = (field: number, items: readonly Uint8Array[]) =>
  Buffer.concat(items.map((item) => lengthDelimited(field, item)));

function anyValueBytes(value: AnyValue): Uint8Array {
  switch (value.kind) {
    case 'string':
      return lengthDelimited(1, strBytes(value.value));
    case 'bool':
      return varintField(2, value.value ? 1n : 0n);
    case 'int':
      return varintField(3, value.value);
    case 'double':
      return double(4, value.value);
    case 'bytes':
      return lengthDelimited(7, value.value);
    case 'array':
      return lengthDelimited(5, messages(1, value.values.map(anyValueBytes)));
    case 'kvlist':
      return lengthDelimited(6, messages(1, value.values.map(keyValueBytes)));
    case 'deep': {
      // Each level is a prefix of tags and lengths: built from the inside out, joined once.
      const leaf = anyValueBytes(value.leaf);
      const prefixes: Uint8Array[] = [];
      let size = leaf.length;
      const header = (field: number, length: number) => Buffer.concat([tag(field, 2), varint(BigInt(length))]);
      for (let i = 0; i < value.depth; i++) {
        let prefix: Uint8Array;
        if (value.shape === 'array') {
          const element = header(1, size);
          prefix = Buffer.concat([header(5, element.length + size), element]);
        } else {
          const key = lengthDelimited(1, encoder.encode('a'));
          const valueField = header(2, size);
          const keyValue = header(1, key.length + valueField.length + size);
          const list = header(6, keyValue.length + key.length + valueField.length + size);
          prefix = Buffer.concat([list, keyValue, key, valueField]);
        }
        prefixes.push(prefix);
        size += prefix.length;
      }
      return Buffer.concat([...prefixes.reverse(), leaf]);
    }
  }
}

const keyValueBytes = (kv: KeyValue) =>
  Buffer.concat([lengthDelimited(1, strBytes(kv.key)), lengthDelimited(2, anyValueBytes(kv.value))]);
const attributeFields = (field: number, attributes: readonly KeyValue[]) =>
  messages(field, attributes.map(keyValueBytes));

function spanBytes(span: SpanModel): Uint8Array {
  return Buffer.concat([
    lengthDelimited(1, span.traceId),
    lengthDelimited(2, span.spanId),
    span.parentId ? lengthDelimited(4, span.parentId) : new Uint8Array(),
    lengthDelimited(5, strBytes(span.name)),
    varintField(6, BigInt(span.kind)),
    fixed64(7, span.start),
    fixed64(8, span.end),
    attributeFields(9, span.attributes),
    messages(
      11,
      span.events.map((event) =>
        Buffer.concat([
          fixed64(1, event.time),
          lengthDelimited(2, strBytes(event.name)),
          attributeFields(3, event.attributes),
        ]),
      ),
    ),
    lengthDelimited(
      15,
      Buffer.concat([lengthDelimited(2, strBytes(span.statusMessage)), varintField(3, BigInt(span.statusCode))]),
    ),
  ]);
}

function logBytes(log: LogModel): Uint8Array {
  return Buffer.concat([
    fixed64(1, log.time),
    varintField(2, BigInt(log.severity)),
    log.body ? lengthDelimited(5, anyValueBytes(log.body)) : new Uint8Array(),
    attributeFields(6, log.attributes),
    log.traceId ? lengthDelimited(9, log.traceId) : new Uint8Array(),
    log.spanId ? lengthDelimited(10, log.spanId) : new Uint8Array(),
    fixed64(11, log.time),
    lengthDelimited(12, strBytes(log.eventName)),
  ]);
}

/** An ExportTraceServiceRequest or ExportLogsServiceRequest (the same outer layout: resource, scope, items). */
export function requestProtobuf<Item>(request: RequestModel<Item>, signal: 'traces' | 'logs'): Buffer {
  const item = signal === 'traces' ? (spanBytes as (i: Item) => Uint8Array) : (logBytes as (i: Item) => Uint8Array);
  const scope = lengthDelimited(1, lengthDelimited(1, strBytes(request.scopeName)));
  const scoped = lengthDelimited(2, Buffer.concat([scope, messages(2, request.items.map(item))]));
  const resource = lengthDelimited(1, attributeFields(1, request.resource));
  return lengthDelimited(1, Buffer.concat([resource, scoped]));
}

// ---------------------------------------------------------------- OTLP/JSON

/** JSON text written verbatim (numbers JSON.stringify cannot write, nesting as text). */
export class RawJson {
  constructor(readonly text: string) {}
}

/** Bytes written inside a JSON string as they are (so that the text need not be UTF-8). */
export class RawBytes {
  constructor(readonly bytes: Uint8Array) {}
}

/**
 * JSON text as bytes, with RawJson, RawBytes and bigints; `replace` may change each value first.
 * Iterative: fuzz values nest deeper than JSON.stringify's recursion allows (about 4,000 levels).
 */
export function jsonBytes(value: unknown, replace: (item: unknown) => unknown = (item) => item): Buffer {
  const parts: (string | Uint8Array)[] = [];
  const todo: unknown[] = [value];
  while (todo.length > 0) {
    const next = todo.pop();
    const item = next instanceof Emit ? next : replace(next);
    if (item instanceof Emit) parts.push(item.text);
    else if (item instanceof RawJson) parts.push(item.text);
    else if (item instanceof RawBytes) parts.push('"', item.bytes, '"');
    else if (typeof item === 'bigint') parts.push(item.toString());
    else if (item === null || item === undefined || typeof item !== 'object')
      parts.push(JSON.stringify(item) ?? 'null');
    else {
      const entries: [string | null, unknown][] = Array.isArray(item)
        ? item.map((child) => [null, child])
        : Object.entries(item).filter(([, child]) => child !== undefined);
      const [open, close] = Array.isArray(item) ? ['[', ']'] : ['{', '}'];
      // Pushed in reverse: the stack pops the opening bracket first.
      todo.push(new Emit(close));
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, child] = entries[i];
        todo.push(child, new Emit(`${i > 0 ? ',' : ''}${key === null ? '' : `${JSON.stringify(key)}:`}`));
      }
      todo.push(new Emit(open));
    }
  }
  return Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part, 'utf8') : part)));
}

class Emit {
  constructor(readonly text: string) {}
}

/** A Str as a JSON string value; raw-byte pieces travel as RawBytes (the string is then split). */
function strJson(str: Str): string | RawBytes {
  if (str.every((piece) => typeof piece === 'string')) return str.join('');
  return new RawBytes(
    Buffer.concat(
      str.map((piece) => (typeof piece === 'string' ? Buffer.from(JSON.stringify(piece).slice(1, -1)) : piece)),
    ),
  );
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

function anyValueJson(value: AnyValue): unknown {
  switch (value.kind) {
    case 'string':
      return { stringValue: strJson(value.value) };
    case 'bool':
      return { boolValue: value.value };
    case 'int':
      return { intValue: value.value.toString() };
    case 'double':
      return { doubleValue: Number.isFinite(value.value) ? value.value : String(value.value) };
    case 'bytes':
      return { bytesValue: Buffer.from(value.value).toString('base64') };
    case 'array':
      return { arrayValue: { values: value.values.map(anyValueJson) } };
    case 'kvlist':
      return { kvlistValue: { values: value.values.map(keyValueJson) } };
    case 'deep': {
      let inner = anyValueJson(value.leaf);
      for (let i = 0; i < value.depth; i++) {
        inner =
          value.shape === 'array'
            ? { arrayValue: { values: [inner] } }
            : { kvlistValue: { values: [{ key: 'a', value: inner }] } };
      }
      return inner;
    }
  }
}

const keyValueJson = (kv: KeyValue) => ({ key: strJson(kv.key), value: anyValueJson(kv.value) });

function spanJson(span: SpanModel): unknown {
  return {
    traceId: hex(span.traceId),
    spanId: hex(span.spanId),
    ...(span.parentId ? { parentSpanId: hex(span.parentId) } : {}),
    name: strJson(span.name),
    kind: span.kind,
    startTimeUnixNano: span.start.toString(),
    endTimeUnixNano: span.end.toString(),
    attributes: span.attributes.map(keyValueJson),
    events: span.events.map((event) => ({
      timeUnixNano: event.time.toString(),
      name: strJson(event.name),
      attributes: event.attributes.map(keyValueJson),
    })),
    status: { code: span.statusCode, message: strJson(span.statusMessage) },
  };
}

function logJson(log: LogModel): unknown {
  return {
    timeUnixNano: log.time.toString(),
    observedTimeUnixNano: log.time.toString(),
    severityNumber: log.severity,
    eventName: strJson(log.eventName),
    ...(log.body ? { body: anyValueJson(log.body) } : {}),
    attributes: log.attributes.map(keyValueJson),
    ...(log.traceId ? { traceId: hex(log.traceId) } : {}),
    ...(log.spanId ? { spanId: hex(log.spanId) } : {}),
  };
}

/** The OTLP/JSON object of a request (RawBytes inside: write it with `jsonBytes`). */
export function requestJson<Item>(request: RequestModel<Item>, signal: 'traces' | 'logs'): unknown {
  const resource = { attributes: request.resource.map(keyValueJson) };
  const scope = { name: strJson(request.scopeName) };
  return signal === 'traces'
    ? {
        resourceSpans: [
          { resource, scopeSpans: [{ scope, spans: request.items.map((item) => spanJson(item as SpanModel)) }] },
        ],
      }
    : {
        resourceLogs: [
          { resource, scopeLogs: [{ scope, logRecords: request.items.map((item) => logJson(item as LogModel)) }] },
        ],
      };
}
