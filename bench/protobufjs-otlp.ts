import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import {
  finishBatch,
  invalidLogIds,
  invalidSpanIds,
  newLogBatch,
  newSpanBatch,
  noAttribution,
  noteAttribution,
  pushLog,
  pushSpan,
  reject,
  timestampOrNull,
  type Attribution,
  type BatchBuilder,
  type DecodedBatch,
  type DecodedLog,
  type DecodedSpan,
  type ResourceContext,
} from '../src/otlp/batch.js';

/**
 * OTLP requests decoded by protobufjs (the library the issue measures agl's hand-written decoder
 * against), from the .proto files in bench/proto, and then turned into the same DecodedBatch the
 * hand-written decoder makes, through the rules the JSON decoder uses (batch.ts): attributes,
 * events, links and bodies as JSON text, ids as hex, times as int64 nanoseconds, attribution.
 * What it leaves out: the UTF-8 check of copied bytes (protobufjs makes JS strings, which are
 * always written as valid UTF-8) and the nesting limit on values; the bench checks that both
 * paths give the same rows for its requests.
 */
export class ProtobufjsOtlp {
  private readonly traces: protobuf.Type;
  private readonly logs: protobuf.Type;

  constructor() {
    const protoDir = fileURLToPath(new URL('../../bench/proto/', import.meta.url));
    const root = new protobuf.Root();
    root.resolvePath = (_origin, target) => join(protoDir, target);
    root.loadSync([
      'opentelemetry/proto/collector/trace/v1/trace_service.proto',
      'opentelemetry/proto/collector/logs/v1/logs_service.proto',
    ]);
    this.traces = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
    this.logs = root.lookupType('opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest');
  }

  /** The message objects protobufjs makes (fixed64 and int64 as Long, bytes as Buffer). */
  decodeTraces(body: Uint8Array): TracesRequest {
    return this.traces.decode(body) as unknown as TracesRequest;
  }

  decodeLogs(body: Uint8Array): LogsRequest {
    return this.logs.decode(body) as unknown as LogsRequest;
  }

  /** Decodes and converts: the hand-written decoder's output. */
  tracesBatch(body: Uint8Array): DecodedBatch {
    return tracesBatch(this.decodeTraces(body));
  }

  logsBatch(body: Uint8Array): DecodedBatch {
    return logsBatch(this.decodeLogs(body));
  }
}

// What protobufjs decodes, as far as the conversion reads it (field names in camelCase; a field
// absent from the wire is not an own property, its default sits on the prototype).
interface Long {
  low: number;
  high: number;
  unsigned: boolean;
  toString(): string;
}
interface AnyValue {
  /** The oneof's virtual field: the name of the member that is set. */
  value?: string;
  stringValue: string;
  boolValue: boolean;
  intValue: Long;
  doubleValue: number;
  arrayValue: { values: AnyValue[] };
  kvlistValue: { values: KeyValue[] };
  bytesValue: Buffer;
}
interface KeyValue {
  key: string;
  value?: AnyValue | null;
}
interface Scope {
  name?: string;
  version?: string;
}
interface Resource {
  attributes: KeyValue[];
}
interface Span {
  traceId: Buffer;
  spanId: Buffer;
  traceState: string;
  parentSpanId: Buffer;
  flags: number;
  name: string;
  kind: number;
  startTimeUnixNano: Long;
  endTimeUnixNano: Long;
  attributes: KeyValue[];
  events: SpanEvent[];
  links: SpanLink[];
  status?: { message: string; code: number } | null;
}
interface SpanEvent {
  timeUnixNano: Long;
  name: string;
  attributes: KeyValue[];
  droppedAttributesCount: number;
}
interface SpanLink {
  traceId: Buffer;
  spanId: Buffer;
  traceState: string;
  attributes: KeyValue[];
  flags: number;
}
interface LogRecord {
  timeUnixNano: Long;
  observedTimeUnixNano: Long;
  severityNumber: number;
  severityText: string;
  body?: AnyValue | null;
  attributes: KeyValue[];
  flags: number;
  traceId: Buffer;
  spanId: Buffer;
  eventName: string;
}
interface TracesRequest {
  resourceSpans: { resource?: Resource | null; scopeSpans: { scope?: Scope | null; spans: Span[] }[] }[];
}
interface LogsRequest {
  resourceLogs: { resource?: Resource | null; scopeLogs: { scope?: Scope | null; logRecords: LogRecord[] }[] }[];
}

const has = (message: object, field: string) => Object.hasOwn(message, field);

function tracesBatch(request: TracesRequest): DecodedBatch {
  const batch = newSpanBatch();
  for (const group of request.resourceSpans) {
    const resource = resourceOf(group.resource);
    for (const scopeSpans of group.scopeSpans) {
      const context = contextOf(resource, scopeSpans.scope);
      for (const span of scopeSpans.spans) pushSpanOf(batch, span, context);
    }
  }
  return finishBatch(batch);
}

function pushSpanOf(batch: BatchBuilder, span: Span, context: ResourceContext): void {
  const traceId = span.traceId.toString('hex');
  const spanId = span.spanId.toString('hex');
  const parentId = span.parentSpanId.length > 0 ? span.parentSpanId.toString('hex') : null;
  const invalid = invalidSpanIds(traceId, spanId, parentId);
  if (invalid) {
    reject(batch, `span "${span.name}": ${invalid}`);
    return;
  }
  const attribution = noAttribution();
  const decoded: DecodedSpan = {
    traceId,
    spanId,
    parentId,
    traceState: span.traceState || null,
    flags: has(span, 'flags') ? span.flags | 0 : null,
    name: span.name,
    kind: span.kind,
    startTime: time(span.startTimeUnixNano),
    endTime: time(span.endTimeUnixNano),
    attributesJson: attributesJson(span.attributes, attribution),
    eventsJson: `[${span.events.map(eventJson).join(',')}]`,
    linksJson: `[${span.links.map(linkJson).join(',')}]`,
    statusCode: span.status?.code ?? 0,
    statusMessage: span.status?.message || null,
    attribution,
  };
  pushSpan(batch.rows, decoded, context);
}

const eventJson = (e: SpanEvent) =>
  `{"time_unix_nano":"${e.timeUnixNano.toString()}","name":${JSON.stringify(e.name)},"attributes":${attributesJson(e.attributes)}${e.droppedAttributesCount ? `,"dropped_attributes_count":${e.droppedAttributesCount}` : ''}}`;

const linkJson = (l: SpanLink) =>
  `{"trace_id":"${l.traceId.toString('hex')}","span_id":"${l.spanId.toString('hex')}","trace_state":${JSON.stringify(l.traceState)},"attributes":${attributesJson(l.attributes)}${has(l, 'flags') ? `,"flags":${l.flags}` : ''}}`;

function logsBatch(request: LogsRequest): DecodedBatch {
  const batch = newLogBatch();
  for (const group of request.resourceLogs) {
    const resource = resourceOf(group.resource);
    for (const scopeLogs of group.scopeLogs) {
      const context = contextOf(resource, scopeLogs.scope);
      for (const record of scopeLogs.logRecords) pushLogOf(batch, record, context);
    }
  }
  return finishBatch(batch);
}

function pushLogOf(batch: BatchBuilder, record: LogRecord, context: ResourceContext): void {
  const traceId = record.traceId.length > 0 ? record.traceId.toString('hex') : null;
  const spanId = record.spanId.length > 0 ? record.spanId.toString('hex') : null;
  const invalid = invalidLogIds(traceId, spanId);
  if (invalid) {
    reject(batch, invalid);
    return;
  }
  const attribution = noAttribution();
  const decoded: DecodedLog = {
    time: time(record.timeUnixNano),
    observedTime: time(record.observedTimeUnixNano),
    traceId,
    spanId,
    severityNumber: has(record, 'severityNumber') ? record.severityNumber : null,
    severityText: record.severityText || null,
    eventName: record.eventName || null,
    bodyJson: record.body ? anyValueJson(record.body) : null,
    attributesJson: attributesJson(record.attributes, attribution),
    flags: has(record, 'flags') ? record.flags | 0 : null,
    attribution,
  };
  pushLog(batch.rows, decoded, context);
}

interface ResourceFields {
  readonly json: string;
  readonly serviceName: string | null;
  readonly attribution: Attribution;
}

function resourceOf(resource: Resource | null | undefined): ResourceFields {
  const attribution = noAttribution();
  const attributes = resource?.attributes ?? [];
  let serviceName: string | null = null;
  for (const kv of attributes)
    if (kv.key === 'service.name' && kv.value?.value === 'stringValue') serviceName = kv.value.stringValue;
  return { json: attributesJson(attributes, attribution), serviceName, attribution };
}

function contextOf(resource: ResourceFields, scope: Scope | null | undefined): ResourceContext {
  return {
    resourceJson: resource.json,
    serviceName: resource.serviceName,
    attribution: resource.attribution,
    scopeName: scope && has(scope, 'name') ? (scope.name ?? null) : null,
    scopeVersion: scope?.version || null,
  };
}

/** fixed64 nanoseconds; 0 (not set) and values past int64 are NULL. */
const time = (nanos: Long) => timestampOrNull((BigInt(nanos.high >>> 0) << 32n) | BigInt(nanos.low >>> 0));

function attributesJson(attributes: KeyValue[], attribution?: Attribution): string {
  let json = '{';
  for (let i = 0; i < attributes.length; i++) {
    const { key, value } = attributes[i];
    if (i > 0) json += ',';
    json += `${JSON.stringify(key)}:${value ? anyValueJson(value) : 'null'}`;
    if (attribution && value && key.startsWith('agentlightning.')) {
      const scalar =
        value.value === 'stringValue'
          ? value.stringValue
          : value.value === 'intValue'
            ? Number(value.intValue.toString())
            : null;
      noteAttribution(attribution, key, scalar);
    }
  }
  return `${json}}`;
}

function anyValueJson(v: AnyValue): string {
  switch (v.value) {
    case 'stringValue':
      return JSON.stringify(v.stringValue);
    case 'boolValue':
      return String(v.boolValue);
    case 'intValue':
      return v.intValue.toString();
    case 'doubleValue':
      return Number.isFinite(v.doubleValue) ? String(v.doubleValue) : `"${v.doubleValue}"`;
    case 'arrayValue':
      return `[${v.arrayValue.values.map(anyValueJson).join(',')}]`;
    case 'kvlistValue':
      return attributesJson(v.kvlistValue.values);
    case 'bytesValue':
      return `"${v.bytesValue.toString('base64')}"`;
    default:
      return 'null';
  }
}
