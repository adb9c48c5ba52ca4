import type { Context } from '@opentelemetry/api';
import { ProtobufTraceSerializer, type IExportTraceServiceResponse, type ISerializer } from '@opentelemetry/otlp-transformer';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan, Span, SpanProcessor } from '@opentelemetry/sdk-trace';
import { encodeSpanField } from './span-protobuf.js';

/**
 * OTLP protobuf requests put together from spans encoded as each one ended. The SDK's serializer
 * encodes a whole batch when it is exported: 250 LLM spans with their bodies held the app's
 * event loop for 6 to 19 ms, once a batch, and the call in flight waited that long. Encoding each
 * span as it ends (after the app has its answer) spreads that work over the calls; an export
 * then only joins bytes. The request is the one the SDK's serializer makes of the same spans,
 * byte for byte: the same grouping by resource (object) and scope (name, version, schema URL).
 *
 * A span's message is written by span-protobuf.ts. A resource's and a scope's own fields, which
 * are the same for many spans, are cut out of the SDK serializer's request of one of their
 * spans, once.
 */

// Field numbers: ExportTraceServiceRequest.resource_spans, ResourceSpans.scope_spans, ScopeSpans.spans.
const RESOURCE_SPANS = 1;
const SCOPE_SPANS = 2;
const SPANS = 2;

/** A span processor (placed before the batch processor) that encodes each span as it ends. */
export class SpanEncoder implements SpanProcessor {
  private readonly spans = new WeakMap<ReadableSpan, Uint8Array>();
  private readonly resources = new WeakMap<Resource, Uint8Array>();
  private readonly scopes = new Map<string, Uint8Array>();

  onStart(_span: Span, _context: Context): void {}

  onEnd(span: ReadableSpan): void {
    this.spans.set(span, encodeSpan(span));
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }

  shutdown(): Promise<void> {
    return Promise.resolve();
  }

  /** The export request of `spans`, from their encodings (encoded now when a span has none). */
  request(spans: ReadableSpan[]): Uint8Array {
    const groups = new Map<Resource, Map<string, ReadableSpan[]>>();
    for (const span of spans) {
      let scopes = groups.get(span.resource);
      if (!scopes) groups.set(span.resource, (scopes = new Map()));
      const key = scopeKey(span);
      const group = scopes.get(key);
      if (group) group.push(span);
      else scopes.set(key, [span]);
    }
    const out = new ByteList();
    for (const [resource, scopes] of groups) {
      const scopeSpans = new ByteList();
      for (const [key, group] of scopes) {
        const scope = new ByteList();
        scope.push(this.scopeFields(key, group[0]));
        for (const span of group) scope.push(this.spans.get(span) ?? encodeSpan(span));
        scopeSpans.field(SCOPE_SPANS, scope);
      }
      const resourceSpans = new ByteList();
      resourceSpans.push(this.resourceFields(resource, scopes.values().next().value![0]));
      resourceSpans.append(scopeSpans);
      out.field(RESOURCE_SPANS, resourceSpans);
    }
    return out.join();
  }

  /** The exporter's serializer: requests from these encodings, responses as the SDK reads them. */
  serializer(): ISerializer<ReadableSpan[], IExportTraceServiceResponse> {
    return {
      serializeRequest: (spans) => this.request(spans),
      deserializeResponse: (data) => ProtobufTraceSerializer.deserializeResponse(data),
    };
  }

  /** ResourceSpans' fields but its scope_spans (resource, schema URL). */
  private resourceFields(resource: Resource, span: ReadableSpan): Uint8Array {
    let fields = this.resources.get(resource);
    if (!fields) {
      fields = splitField(resourceSpansOf(span), SCOPE_SPANS).rest;
      // Attributes still to come from an asynchronous detector are encoded once they are there.
      if (!resource.asyncAttributesPending) this.resources.set(resource, fields);
    }
    return fields;
  }

  /** ScopeSpans' fields but its spans (scope, schema URL). */
  private scopeFields(key: string, span: ReadableSpan): Uint8Array {
    let fields = this.scopes.get(key);
    if (!fields) {
      fields = splitField(splitField(resourceSpansOf(span), SCOPE_SPANS).value, SPANS).rest;
      this.scopes.set(key, fields);
    }
    return fields;
  }
}

/** The key the SDK's serializer groups scopes by. */
const scopeKey = ({ instrumentationScope: scope }: ReadableSpan) => `${scope.name}@${scope.version || ''}:${scope.schemaUrl || ''}`;

/** The ResourceSpans of the request of `span` alone. */
function resourceSpansOf(span: ReadableSpan): Uint8Array {
  return splitField(ProtobufTraceSerializer.serializeRequest([span])!, RESOURCE_SPANS).value;
}

/** A span as a `spans` field of ScopeSpans (tag, length, Span message). */
const encodeSpan = (span: ReadableSpan) => encodeSpanField(span, SPANS);

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
    this.push(Uint8Array.from([...varint(number * 8 + 2), ...varint(value.length)]));
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
    const tag = read();
    const wire = tag & 7;
    let valueStart = at;
    if (wire === 0) read();
    else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else if (wire === 2) {
      const length = read();
      valueStart = at;
      at += length;
    } else throw new Error(`unexpected protobuf wire type ${wire}`);
    if (wire === 2 && Math.floor(tag / 8) === number && value === undefined) value = message.subarray(valueStart, at);
    else rest.push(message.subarray(start, at));
  }
  if (value === undefined) throw new Error(`protobuf field ${number} missing`);
  return { value, rest: rest.join() };
}
