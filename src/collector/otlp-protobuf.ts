import {
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
  finishBatch,
  type DecodedBatch,
  type DecodedLog,
  type DecodedSpan,
  type ResourceContext,
} from './otlp-rows.js';
import { FIXED32, FIXED64, LEN, ProtobufReader, VARINT } from './protobuf-reader.js';

/**
 * Decodes OTLP protobuf requests (opentelemetry/proto/collector/{trace,logs}/v1) straight into
 * store rows: attribute lists become JSON text as they are read, with no intermediate objects.
 * Field numbers are those of the OTLP .proto files; unknown fields are skipped, as protobuf
 * requires. Throws ProtobufError for a body that is not such a message.
 */
export function decodeTracesProtobuf(body: Buffer): DecodedBatch {
  const batch = newSpanBatch();
  forEachResourceGroup(new ProtobufReader(body), (r, end, context) => {
    const span = readSpan(r, end);
    const invalid = invalidSpanIds(span.traceId, span.spanId, span.parentId);
    if (invalid) reject(batch, `span "${span.name}": ${invalid}`);
    else pushSpan(batch.rows, span, context);
  });
  return finishBatch(batch);
}

export function decodeLogsProtobuf(body: Buffer): DecodedBatch {
  const batch = newLogBatch();
  forEachResourceGroup(new ProtobufReader(body), (r, end, context) => {
    const log = readLogRecord(r, end);
    const invalid = invalidLogIds(log);
    if (invalid) reject(batch, invalid);
    else pushLog(batch.rows, log, context);
  });
  return finishBatch(batch);
}

type ItemReader = (r: ProtobufReader, end: number, context: ResourceContext) => void;

/**
 * Walks Export*ServiceRequest -> Resource{Spans,Logs} -> Scope{Spans,Logs} -> items. The
 * resource and scope fields may follow the items on the wire, so each group is read twice:
 * first for its context, then for its items.
 */
function forEachResourceGroup(r: ProtobufReader, readItem: ItemReader): void {
  while (!r.done) {
    const tag = r.tag();
    if (tag >>> 3 !== 1) {
      r.skip(tag & 7);
      continue;
    }
    r.expect(tag, LEN);
    const groupEnd = r.lengthDelimited();
    const groupStart = r.pos;
    let resource: Omit<ResourceContext, 'scopeName' | 'scopeVersion'> = {
      resourceJson: '{}',
      serviceName: null,
      attribution: noAttribution(),
    };
    while (r.pos < groupEnd) {
      const t = r.tag();
      if (t >>> 3 === 1) {
        r.expect(t, LEN);
        resource = readResource(r, r.lengthDelimited());
      } else r.skip(t & 7);
    }
    r.pos = groupStart;
    while (r.pos < groupEnd) {
      const t = r.tag();
      if (t >>> 3 === 2) {
        r.expect(t, LEN);
        const scopeEnd = r.lengthDelimited();
        readScopeGroup(r, scopeEnd, resource, readItem);
        r.pos = scopeEnd;
      } else r.skip(t & 7);
    }
    r.pos = groupEnd;
  }
}

function readScopeGroup(
  r: ProtobufReader,
  end: number,
  resource: Omit<ResourceContext, 'scopeName' | 'scopeVersion'>,
  readItem: ItemReader,
): void {
  const start = r.pos;
  let scopeName: string | null = null;
  let scopeVersion: string | null = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t >>> 3 !== 1) {
      r.skip(t & 7);
      continue;
    }
    r.expect(t, LEN);
    const scopeEnd = r.lengthDelimited();
    while (r.pos < scopeEnd) {
      const st = r.tag();
      const field = st >>> 3;
      if (field === 1 && (st & 7) === LEN) scopeName = r.string();
      else if (field === 2 && (st & 7) === LEN) scopeVersion = r.string();
      else r.skip(st & 7);
    }
  }
  const context: ResourceContext = { ...resource, scopeName, scopeVersion };
  r.pos = start;
  while (r.pos < end) {
    const t = r.tag();
    if (t >>> 3 === 2) {
      r.expect(t, LEN);
      const itemEnd = r.lengthDelimited();
      readItem(r, itemEnd, context);
      r.pos = itemEnd;
    } else r.skip(t & 7);
  }
}

function readResource(r: ProtobufReader, end: number): Omit<ResourceContext, 'scopeName' | 'scopeVersion'> {
  const attribution = noAttribution();
  const found: { serviceName: string | null } = { serviceName: null };
  let json = '';
  while (r.pos < end) {
    const t = r.tag();
    if (t >>> 3 === 1 && (t & 7) === LEN) {
      json = appendKeyValue(r, r.lengthDelimited(), json, attribution, found);
    } else r.skip(t & 7);
  }
  return { resourceJson: `{${json}}`, serviceName: found.serviceName, attribution };
}

function readSpan(r: ProtobufReader, end: number): DecodedSpan {
  const span: DecodedSpan = {
    traceId: '',
    spanId: '',
    parentId: null,
    traceState: null,
    flags: null,
    name: '',
    kind: 0,
    startTime: null,
    endTime: null,
    attributesJson: '{}',
    eventsJson: '[]',
    linksJson: '[]',
    statusCode: 0,
    statusMessage: null,
    attribution: noAttribution(),
  };
  let attributes = '';
  let events = '';
  let links = '';
  while (r.pos < end) {
    const t = r.tag();
    switch (t) {
      case (1 << 3) | LEN: span.traceId = r.hex(); break;
      case (2 << 3) | LEN: span.spanId = r.hex(); break;
      case (3 << 3) | LEN: span.traceState = r.string() || null; break;
      case (4 << 3) | LEN: span.parentId = r.hex() || null; break;
      case (5 << 3) | LEN: span.name = r.string(); break;
      case (6 << 3) | VARINT: span.kind = r.uint32(); break;
      case (7 << 3) | FIXED64: span.startTime = timestampOrNull(r.fixed64()); break;
      case (8 << 3) | FIXED64: span.endTime = timestampOrNull(r.fixed64()); break;
      case (9 << 3) | LEN: attributes = appendKeyValue(r, r.lengthDelimited(), attributes, span.attribution); break;
      case (11 << 3) | LEN: events = (events ? events + ',' : '') + readEvent(r, r.lengthDelimited()); break;
      case (13 << 3) | LEN: links = (links ? links + ',' : '') + readLink(r, r.lengthDelimited()); break;
      case (15 << 3) | LEN: readStatus(r, r.lengthDelimited(), span); break;
      case (16 << 3) | FIXED32: span.flags = r.fixed32() | 0; break;
      default: r.skip(t & 7);
    }
  }
  span.attributesJson = `{${attributes}}`;
  span.eventsJson = `[${events}]`;
  span.linksJson = `[${links}]`;
  return span;
}

function readStatus(r: ProtobufReader, end: number, span: DecodedSpan): void {
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((2 << 3) | LEN)) span.statusMessage = r.string() || null;
    else if (t === ((3 << 3) | VARINT)) span.statusCode = r.uint32();
    else r.skip(t & 7);
  }
}

function readEvent(r: ProtobufReader, end: number): string {
  let time = '0';
  let name = '';
  let attributes = '';
  let dropped = 0;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | FIXED64)) time = r.fixed64().toString();
    else if (t === ((2 << 3) | LEN)) name = r.string();
    else if (t === ((3 << 3) | LEN)) attributes = appendKeyValue(r, r.lengthDelimited(), attributes);
    else if (t === ((4 << 3) | VARINT)) dropped = r.uint32();
    else r.skip(t & 7);
  }
  const droppedJson = dropped ? `,"dropped_attributes_count":${dropped}` : '';
  return `{"time_unix_nano":"${time}","name":${JSON.stringify(name)},"attributes":{${attributes}}${droppedJson}}`;
}

function readLink(r: ProtobufReader, end: number): string {
  let traceId = '';
  let spanId = '';
  let traceState = '';
  let attributes = '';
  let flags: number | null = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) traceId = r.hex();
    else if (t === ((2 << 3) | LEN)) spanId = r.hex();
    else if (t === ((3 << 3) | LEN)) traceState = r.string();
    else if (t === ((4 << 3) | LEN)) attributes = appendKeyValue(r, r.lengthDelimited(), attributes);
    else if (t === ((6 << 3) | FIXED32)) flags = r.fixed32();
    else r.skip(t & 7);
  }
  const flagsJson = flags === null ? '' : `,"flags":${flags}`;
  return `{"trace_id":"${traceId}","span_id":"${spanId}","trace_state":${JSON.stringify(traceState)},"attributes":{${attributes}}${flagsJson}}`;
}

function readLogRecord(r: ProtobufReader, end: number): DecodedLog {
  const log: DecodedLog = {
    time: null,
    observedTime: null,
    traceId: null,
    spanId: null,
    severityNumber: null,
    severityText: null,
    eventName: null,
    bodyJson: null,
    attributesJson: '{}',
    flags: null,
    attribution: noAttribution(),
  };
  let attributes = '';
  while (r.pos < end) {
    const t = r.tag();
    switch (t) {
      case (1 << 3) | FIXED64: log.time = timestampOrNull(r.fixed64()); break;
      case (11 << 3) | FIXED64: log.observedTime = timestampOrNull(r.fixed64()); break;
      case (2 << 3) | VARINT: log.severityNumber = r.uint32() | 0; break;
      case (3 << 3) | LEN: log.severityText = r.string() || null; break;
      case (5 << 3) | LEN: log.bodyJson = anyValueJson(r, r.lengthDelimited()); break;
      case (6 << 3) | LEN: attributes = appendKeyValue(r, r.lengthDelimited(), attributes, log.attribution); break;
      case (8 << 3) | FIXED32: log.flags = r.fixed32() | 0; break;
      case (9 << 3) | LEN: log.traceId = r.hex() || null; break;
      case (10 << 3) | LEN: log.spanId = r.hex() || null; break;
      case (12 << 3) | LEN: log.eventName = r.string() || null; break;
      default: r.skip(t & 7);
    }
  }
  log.attributesJson = `{${attributes}}`;
  return log;
}

// Attribute keys repeat in every span: keep their text and JSON text, looked up by their bytes
// read as latin1 (cheap to make, and exact as a map key).
const EMPTY_KEY = { key: '', json: '""' };
const keyCache = new Map<string, { key: string; json: string }>();

function readKey(r: ProtobufReader, end: number): { key: string; json: string } {
  const bytes = r.buf.toString('latin1', r.pos, end);
  let entry = keyCache.get(bytes);
  if (entry === undefined) {
    const key = r.buf.toString('utf8', r.pos, end);
    entry = { key, json: JSON.stringify(key) };
    if (keyCache.size > 10_000) keyCache.clear();
    keyCache.set(bytes, entry);
  }
  r.pos = end;
  return entry;
}

/**
 * Reads one KeyValue and appends `"key":value` to `json` (comma-separated). Notes agl's
 * attribution keys and service.name on the way.
 */
function appendKeyValue(
  r: ProtobufReader,
  end: number,
  json: string,
  attribution?: Attribution,
  resource?: { serviceName: string | null },
): string {
  // proto3 leaves an empty key off the wire.
  let key: { json: string; key: string } = EMPTY_KEY;
  let value = 'null';
  let valueStart = -1;
  let valueEnd = -1;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) key = readKey(r, r.lengthDelimited());
    else if (t === ((2 << 3) | LEN)) {
      valueEnd = r.lengthDelimited();
      valueStart = r.pos;
      value = anyValueJson(r, valueEnd);
    } else r.skip(t & 7);
  }
  if (valueStart >= 0 && (attribution || resource) && (key.key.startsWith('agentlightning.') || key.key === 'service.name')) {
    const scalar = scalarValue(new ProtobufReader(r.buf, valueStart, valueEnd));
    if (attribution) noteAttribution(attribution, key.key, scalar);
    if (resource && key.key === 'service.name' && typeof scalar === 'string') resource.serviceName = scalar;
  }
  return `${json ? json + ',' : ''}${key.json}:${value}`;
}

/** AnyValue as JSON: bytes as base64, int64 exact, NaN and infinities as strings. */
function anyValueJson(r: ProtobufReader, end: number): string {
  let json = 'null';
  while (r.pos < end) {
    const t = r.tag();
    switch (t) {
      case (1 << 3) | LEN: json = JSON.stringify(r.string()); break;
      case (2 << 3) | VARINT: json = r.uint32() !== 0 ? 'true' : 'false'; break;
      case (3 << 3) | VARINT: json = r.int64Text(); break;
      case (4 << 3) | FIXED64: {
        const d = r.double();
        json = Number.isFinite(d) ? String(d) : `"${d}"`;
        break;
      }
      case (5 << 3) | LEN: json = arrayValueJson(r, r.lengthDelimited()); break;
      case (6 << 3) | LEN: {
        const listEnd = r.lengthDelimited();
        let items = '';
        while (r.pos < listEnd) {
          const lt = r.tag();
          if (lt === ((1 << 3) | LEN)) items = appendKeyValue(r, r.lengthDelimited(), items);
          else r.skip(lt & 7);
        }
        json = `{${items}}`;
        break;
      }
      case (7 << 3) | LEN: json = `"${r.base64()}"`; break;
      default: r.skip(t & 7);
    }
  }
  return json;
}

function arrayValueJson(r: ProtobufReader, end: number): string {
  let items = '';
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) {
      const item = anyValueJson(r, r.lengthDelimited());
      items = items ? `${items},${item}` : item;
    } else r.skip(t & 7);
  }
  return `[${items}]`;
}

/** A string or int AnyValue as a JS value (for attribution keys); null for other kinds. */
function scalarValue(r: ProtobufReader): string | number | null {
  let value: string | number | null = null;
  while (!r.done) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) value = r.string();
    else if (t === ((3 << 3) | VARINT)) value = Number(r.int64Text());
    else r.skip(t & 7);
  }
  return value;
}
