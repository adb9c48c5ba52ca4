import type { Context, SpanContext } from '@opentelemetry/api';
import {
  ProtobufTraceSerializer,
  type IExportTraceServiceResponse,
  type ISerializer,
} from '@opentelemetry/otlp-transformer';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, Span, SpanProcessor } from '@opentelemetry/sdk-trace';
import { ExportTraceServiceRequest, ResourceSpans, ScopeSpans } from './otlp-proto.js';
import { SpanMessageWriter } from './protobuf-encoder.js';
import { FIXED32, FIXED64, LEN, tag, VARINT } from './protobuf-wire.js';

/**
 * OTLP protobuf requests put together from spans encoded as each one ended. The SDK's serializer
 * encodes a whole batch when it is exported: 250 LLM spans with their bodies held the app's
 * event loop for 6 to 19 ms, once a batch, and the call in flight waited that long. Encoding each
 * span as it ends (after the app has its answer) spreads that work over the calls; an export
 * then only joins bytes. The request is the one the SDK's serializer makes of the same spans,
 * byte for byte: the same grouping by resource (object) and scope (name, version, schema URL).
 *
 * A span's message is written by protobuf-encoder.ts. A resource's and a scope's own fields, which
 * are the same for many spans, are cut out of the SDK serializer's request of one of their
 * spans, once.
 */

/**
 * An ended span as the export queue holds it: its encoding and what a request groups it by, not
 * the span. The queue holds spans for up to the batch delay; as SDK spans (attributes with the
 * call's request and response bodies, events, times) they survived every young-generation GC
 * meanwhile and made each one longer; as bytes they are a few small objects each.
 *
 * It stands in for the span where the SDK's batch processor and exporter only pass it on: they
 * read `spanContext()` (sampled or not) and `resource` (attributes still pending), nothing else.
 */
class EncodedSpan {
  constructor(
    readonly resource: Resource,
    readonly instrumentationScope: ReadableSpan['instrumentationScope'],
    private readonly context: SpanContext,
    /** The span as a `spans` field of ScopeSpans. */
    readonly bytes: Uint8Array,
    readonly scopeFields: Uint8Array,
    /** The resource's fields, or the span itself while they cannot be encoded yet (attributes pending). */
    readonly resourceFields: Uint8Array | ReadableSpan,
  ) {}

  spanContext(): SpanContext {
    return this.context;
  }
}

/**
 * A span processor that encodes each span as it ends and hands `next` (the export queue, the
 * exit flush) its encoding in the span's place.
 */
export class SpanEncoder implements SpanProcessor {
  private readonly encoder = new GroupEncoder();

  constructor(private readonly next: readonly SpanProcessor[]) {}

  onStart(span: Span, context: Context): void {
    for (const processor of this.next) processor.onStart(span, context);
  }

  onEnd(span: ReadableSpan): void {
    const encoder = this.encoder;
    const resourceFields = span.resource.asyncAttributesPending ? span : encoder.resourceFieldsOf(span.resource, span);
    const encoded = new EncodedSpan(
      span.resource,
      span.instrumentationScope,
      span.spanContext(),
      encoder.span(span),
      encoder.scopeFieldsOf(scopeKey(span), span),
      resourceFields,
    );
    for (const processor of this.next) processor.onEnd(encoded as unknown as ReadableSpan);
  }

  async forceFlush(): Promise<void> {
    await Promise.all(this.next.map((processor) => processor.forceFlush()));
  }

  async shutdown(): Promise<void> {
    await Promise.all(this.next.map((processor) => processor.shutdown()));
  }
}

/** The export request of `spans`: ended spans as SpanEncoder handed them on, or SDK spans (encoded now). */
export function requestOf(spans: readonly ReadableSpan[]): Uint8Array {
  const groups = new Map<Resource, Map<string, ReadableSpan[]>>();
  for (const span of spans) {
    let scopes = groups.get(span.resource);
    if (!scopes) {
      scopes = new Map();
      groups.set(span.resource, scopes);
    }
    const key = scopeKey(span);
    const group = scopes.get(key);
    if (group) group.push(span);
    else scopes.set(key, [span]);
  }
  // For the spans that did not pass a SpanEncoder, and resources that were pending when they did.
  const encoder = new GroupEncoder();
  const out = new ByteList();
  for (const [resource, scopes] of groups) {
    const scopeSpans = new ByteList();
    for (const [key, group] of scopes) {
      const scope = new ByteList();
      const first = group[0];
      scope.push(first instanceof EncodedSpan ? first.scopeFields : encoder.scopeFieldsOf(key, first));
      for (const span of group) scope.push(span instanceof EncodedSpan ? span.bytes : encoder.span(span));
      scopeSpans.field(ResourceSpans.scope_spans, scope);
    }
    const [firstGroup] = scopes.values();
    const first = firstGroup[0];
    const fields = first instanceof EncodedSpan ? first.resourceFields : first;
    const resourceSpans = new ByteList();
    resourceSpans.push(fields instanceof Uint8Array ? fields : encoder.resourceFieldsOf(resource, fields));
    resourceSpans.append(scopeSpans);
    out.field(ExportTraceServiceRequest.resource_spans, resourceSpans);
  }
  return out.join();
}

/** The exporter's serializer: requests from the spans' encodings, responses as the SDK reads them. */
export const spanSerializer: ISerializer<ReadableSpan[], IExportTraceServiceResponse> = {
  serializeRequest: requestOf,
  deserializeResponse: (data) => ProtobufTraceSerializer.deserializeResponse(data),
};

/**
 * Encodes the parts of a request: spans (protobuf-encoder.ts), and a resource's and a scope's
 * own fields, once each: the same for every span of them.
 */
class GroupEncoder {
  private readonly spans = new SpanMessageWriter();
  private readonly resources = new WeakMap<Resource, Uint8Array>();
  private readonly scopes = new Map<string, Uint8Array>();

  /** A span as a `spans` field of ScopeSpans (tag, length, Span message). */
  span(span: ReadableSpan): Uint8Array {
    return this.spans.spanField(span, ScopeSpans.spans);
  }

  /** ResourceSpans' fields but its scope_spans (resource, schema URL). */
  resourceFieldsOf(resource: Resource, span: ReadableSpan): Uint8Array {
    let fields = this.resources.get(resource);
    if (!fields) {
      fields = splitField(resourceSpansOf(span), ResourceSpans.scope_spans).rest;
      // Attributes still to come from an asynchronous detector are encoded once they are there.
      if (!resource.asyncAttributesPending) this.resources.set(resource, fields);
    }
    return fields;
  }

  /** ScopeSpans' fields but its spans (scope, schema URL). */
  scopeFieldsOf(key: string, span: ReadableSpan): Uint8Array {
    let fields = this.scopes.get(key);
    if (!fields) {
      fields = splitField(splitField(resourceSpansOf(span), ResourceSpans.scope_spans).value, ScopeSpans.spans).rest;
      this.scopes.set(key, fields);
    }
    return fields;
  }
}

/** The key the SDK's serializer groups scopes by. */
const scopeKey = ({ instrumentationScope: scope }: ReadableSpan) =>
  `${scope.name}@${scope.version || ''}:${scope.schemaUrl || ''}`;

/** The ResourceSpans of the request of `span` alone. */
function resourceSpansOf(span: ReadableSpan): Uint8Array {
  const request = ProtobufTraceSerializer.serializeRequest([span]);
  if (!request) throw new Error('the SDK serializer encoded no request');
  return splitField(request, ExportTraceServiceRequest.resource_spans).value;
}

/** Byte strings to join, with their total length (protobuf lengths are known before the bytes). */
class ByteList {
  readonly parts: Uint8Array[] = [];
  length = 0;

  push(bytes: Uint8Array): void {
    this.parts.push(bytes);
    this.length += bytes.length;
  }

  append(list: ByteList): void {
    for (const part of list.parts) this.push(part);
  }

  /** Appends `value` as the length-delimited field `number`. */
  field(number: number, value: ByteList | Uint8Array): void {
    this.push(Uint8Array.from([...varint(tag(number, LEN)), ...varint(value.length)]));
    if (value instanceof ByteList) this.append(value);
    else this.push(value);
  }

  join(): Uint8Array {
    return Buffer.concat(this.parts, this.length);
  }
}

function varint(value: number): number[] {
  const bytes: number[] = [];
  while (value > 0x7f) {
    bytes.push((value & 0x7f) | 0x80);
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return bytes;
}

/** `message` cut at its first length-delimited field `number`: that field's value, and the other fields. */
function splitField(message: Uint8Array, number: number): { value: Uint8Array; rest: Uint8Array } {
  const rest = new ByteList();
  let value: Uint8Array | undefined;
  let at = 0;
  const read = () => {
    let result = 0;
    for (let scale = 1; ; scale *= 128) {
      const byte = message[at++];
      if (byte === undefined) throw new Error('truncated protobuf');
      result += (byte & 0x7f) * scale;
      if (byte < 0x80) return result;
    }
  };
  while (at < message.length) {
    const start = at;
    const fieldTag = read();
    const wire = fieldTag & 7;
    let valueStart = at;
    if (wire === VARINT) read();
    else if (wire === FIXED64) at += 8;
    else if (wire === FIXED32) at += 4;
    else if (wire === LEN) {
      const length = read();
      valueStart = at;
      at += length;
    } else throw new Error(`unexpected protobuf wire type ${wire}`);
    if (fieldTag === tag(number, LEN) && value === undefined) value = message.subarray(valueStart, at);
    else rest.push(message.subarray(start, at));
  }
  if (value === undefined) throw new Error(`protobuf field ${number} missing`);
  return { value, rest: rest.join() };
}
