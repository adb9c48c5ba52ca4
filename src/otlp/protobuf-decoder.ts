import { isUtf8 } from 'node:buffer';
import { ByteColumnBuilder, withValidUtf8, type ColumnBuilder, type Int64ColumnBuilder } from './column-builders.js';
import type { ColumnValue } from './columns.js';
import { LOG, SPAN } from './span-columns.js';
import {
  finishBatch,
  invalidLogIds,
  invalidSpanIds,
  newLogBatch,
  newSpanBatch,
  noAttribution,
  noteAttribution,
  reject,
  ATTEMPT_ID_KEY,
  ROLLOUT_ID_KEY,
  SEQUENCE_ID_KEY,
  type Attribution,
  type BatchBuilder,
  type DecodedBatch,
} from './batch.js';
import { MAX_NESTING_DEPTH, TooDeepError } from './nesting.js';
import { FIXED32, FIXED64, LEN, ProtobufReader, VARINT } from './protobuf-reader.js';

/**
 * Decodes OTLP protobuf requests (opentelemetry/proto/collector/{trace,logs}/v1) straight into
 * column buffers: attribute lists become JSON text byte by byte, copied from the request, so
 * that no JS string is made for them. Only the few values the store reads (ids, attribution)
 * become strings. Field numbers are those of the OTLP .proto files; unknown fields are skipped,
 * as protobuf requires. Throws ProtobufError for a body that is not such a message.
 */
export function decodeTracesProtobuf(body: Buffer): DecodedBatch {
  const batch = newSpanBatch();
  forEachResourceGroup(new ProtobufReader(body), (r, end, group) => readSpan(r, end, group, batch));
  return finishChecked(batch);
}

export function decodeLogsProtobuf(body: Buffer): DecodedBatch {
  const batch = newLogBatch();
  forEachResourceGroup(new ProtobufReader(body), (r, end, group) => readLogRecord(r, end, group, batch));
  return finishChecked(batch);
}

/** The resource and scope that the spans or log records of one group share, as bytes. */
interface Group {
  readonly resourceJson: Buffer;
  readonly serviceName: string | null;
  readonly attribution: Attribution;
  /** Why every item of the group is refused (its resource is nested too deep), or null. */
  readonly rejection: string | null;
  /** As bytes, checked for UTF-8 with the columns they are copied into. */
  scopeName: Buffer | null;
  scopeVersion: Buffer | null;
}

type ItemReader = (r: ProtobufReader, end: number, group: Group) => void;

/**
 * Walks Export*ServiceRequest -> Resource{Spans,Logs} -> Scope{Spans,Logs} -> items. The
 * resource and scope fields may follow the items on the wire, so each group is read twice:
 * first for its context, then for its items.
 */
function forEachResourceGroup(r: ProtobufReader, readItem: ItemReader): void {
  while (!r.done) {
    const tag = r.tag();
    if (tag !== ((1 << 3) | LEN)) {
      r.skip(tag & 7);
      continue;
    }
    const groupEnd = r.lengthDelimited();
    const groupStart = r.pos;
    let group: Group = { resourceJson: EMPTY_OBJECT, serviceName: null, attribution: noAttribution(), rejection: null, scopeName: null, scopeVersion: null };
    while (r.pos < groupEnd) {
      const t = r.tag();
      if (t === ((1 << 3) | LEN)) group = readResource(r, r.lengthDelimited());
      else r.skip(t & 7);
    }
    r.pos = groupStart;
    while (r.pos < groupEnd) {
      const t = r.tag();
      if (t === ((2 << 3) | LEN)) {
        const scopeEnd = r.lengthDelimited();
        readScopeGroup(r, scopeEnd, group, readItem);
        r.pos = scopeEnd;
      } else r.skip(t & 7);
    }
    r.pos = groupEnd;
  }
}

function readScopeGroup(r: ProtobufReader, end: number, group: Group, readItem: ItemReader): void {
  const start = r.pos;
  group.scopeName = null;
  group.scopeVersion = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t !== ((1 << 3) | LEN)) {
      r.skip(t & 7);
      continue;
    }
    const scopeEnd = r.lengthDelimited();
    while (r.pos < scopeEnd) {
      const st = r.tag();
      if (st === ((1 << 3) | LEN)) group.scopeName = r.bytes();
      else if (st === ((2 << 3) | LEN)) group.scopeVersion = r.bytes();
      else r.skip(st & 7);
    }
  }
  r.pos = start;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((2 << 3) | LEN)) {
      const itemEnd = r.lengthDelimited();
      readItem(r, itemEnd, group);
      r.pos = itemEnd;
    } else r.skip(t & 7);
  }
}

const EMPTY_OBJECT = Buffer.from('{}');
const resourceScratch = new ByteColumnBuilder();

function readResource(r: ProtobufReader, end: number): Group {
  const found: Found = { attribution: noAttribution(), serviceName: null };
  const out = resourceScratch;
  const start = out.size;
  let count = 0;
  try {
    while (r.pos < end) {
      const t = r.tag();
      if (t === ((1 << 3) | LEN)) {
        out.writeByte(count++ === 0 ? 0x7b : 0x2c);
        writeKeyValue(r, r.lengthDelimited(), out, found);
      } else r.skip(t & 7);
    }
  } catch (error) {
    out.size = start;
    if (!(error instanceof TooDeepError)) throw error;
    r.pos = end;
    return { resourceJson: EMPTY_OBJECT, serviceName: null, attribution: noAttribution(), rejection: `resource ${error.message}`, scopeName: null, scopeVersion: null };
  }
  if (count === 0) out.writeAscii('{');
  out.writeByte(0x7d);
  const resourceJson = Buffer.from(out.data.subarray(start, out.size));
  out.size = start;
  return { resourceJson, serviceName: found.serviceName, attribution: found.attribution, rejection: null, scopeName: null, scopeVersion: null };
}

const SPAN_KINDS = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS_CODES = ['UNSET', 'OK', 'ERROR'];
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** Where a span's fields are in the request; the span is written once it is known valid. */
interface SpanFields {
  traceId: number;
  spanId: number;
  parent: number;
  traceState: number;
  name: number;
  start: number;
  end: number;
  kind: number;
  flags: number | null;
  statusCode: number;
  statusMessage: number;
}

function readSpan(r: ProtobufReader, end: number, group: Group, batch: BatchBuilder): void {
  if (group.rejection !== null) {
    reject(batch, group.rejection);
    return;
  }
  const c = batch.rows.columns;
  const attributes = c[SPAN.attributes] as ByteColumnBuilder;
  const events = c[SPAN.events] as ByteColumnBuilder;
  const links = c[SPAN.links] as ByteColumnBuilder;
  // Positions of length-delimited fields are of their tag's value (r.pos after the tag); -1 = absent.
  const f: SpanFields = { traceId: -1, spanId: -1, parent: -1, traceState: -1, name: -1, start: -1, end: -1, kind: 0, flags: null, statusCode: 0, statusMessage: -1 };
  const found: Found = { attribution: noAttribution(), serviceName: null };
  let attributeCount = 0;
  let eventCount = 0;
  let linkCount = 0;
  let tooDeep: TooDeepError | null = null;
  try {
    while (r.pos < end) {
      const t = r.tag();
      switch (t) {
        case (1 << 3) | LEN: f.traceId = r.pos; r.skip(LEN); break;
        case (2 << 3) | LEN: f.spanId = r.pos; r.skip(LEN); break;
        case (3 << 3) | LEN: f.traceState = r.pos; r.skip(LEN); break;
        case (4 << 3) | LEN: f.parent = r.pos; r.skip(LEN); break;
        case (5 << 3) | LEN: f.name = r.pos; r.skip(LEN); break;
        case (6 << 3) | VARINT: f.kind = r.uint32(); break;
        case (7 << 3) | FIXED64: f.start = r.pos; r.skip(FIXED64); break;
        case (8 << 3) | FIXED64: f.end = r.pos; r.skip(FIXED64); break;
        case (9 << 3) | LEN:
          attributes.writeByte(attributeCount === 0 ? 0x7b : 0x2c);
          writeKeyValue(r, r.lengthDelimited(), attributes, found, attributeCount++);
          break;
        case (11 << 3) | LEN:
          events.writeByte(eventCount++ === 0 ? 0x5b : 0x2c);
          writeEvent(r, r.lengthDelimited(), events);
          break;
        case (13 << 3) | LEN:
          links.writeByte(linkCount++ === 0 ? 0x5b : 0x2c);
          writeLink(r, r.lengthDelimited(), links);
          break;
        case (15 << 3) | LEN: readStatus(r, r.lengthDelimited(), f); break;
        case (16 << 3) | FIXED32: f.flags = r.fixed32() | 0; break;
        default: r.skip(t & 7);
      }
    }
  } catch (error) {
    if (!(error instanceof TooDeepError)) throw error;
    tooDeep = error;
  }
  const traceId = idAt(r, f.traceId);
  const spanId = idAt(r, f.spanId);
  const parentId = f.parent < 0 ? null : idAt(r, f.parent) || null;
  const invalid = tooDeep?.message ?? invalidSpanIds(traceId, spanId, parentId);
  if (invalid) {
    attributes.discardPartialRow();
    events.discardPartialRow();
    links.discardPartialRow();
    reject(batch, `span "${f.name < 0 ? '' : stringAt(r, f.name)}": ${invalid}`);
    return;
  }
  attributes.writeAscii(attributeCount === 0 ? '{}' : '}');
  attributes.endRow();
  events.writeAscii(eventCount === 0 ? '[]' : ']');
  events.endRow();
  links.writeAscii(linkCount === 0 ? '[]' : ']');
  links.endRow();

  const own = found.attribution;
  const res = group.attribution;
  c[SPAN.rollout_id].push(own.rolloutId ?? res.rolloutId);
  c[SPAN.attempt_id].push(own.attemptId ?? res.attemptId);
  c[SPAN.sequence_id].push(own.sequenceId ?? res.sequenceId);
  c[SPAN.trace_id].push(traceId);
  c[SPAN.span_id].push(spanId);
  pushBytesAt(r, c[SPAN.parent_id], f.parent, true);
  pushBytesAt(r, c[SPAN.name], f.name, false);
  c[SPAN.kind].push(SPAN_KINDS[f.kind] ?? 'UNSPECIFIED');
  pushFixed64At(r, c[SPAN.start_time], f.start);
  pushFixed64At(r, c[SPAN.end_time], f.end);
  c[SPAN.status_code].push(STATUS_CODES[f.statusCode] ?? 'UNSET');
  pushBytesAt(r, c[SPAN.status_message], f.statusMessage, false, true);
  (c[SPAN.resource] as ByteColumnBuilder).pushBytes(group.resourceJson);
  pushScope(c[SPAN.scope_name] as ByteColumnBuilder, c[SPAN.scope_version] as ByteColumnBuilder, group);
  c[SPAN.service_name].push(group.serviceName);
  pushBytesAt(r, c[SPAN.trace_state], f.traceState, false, true);
  c[SPAN.flags].push(f.flags);
  batch.rows.length++;
}

function readStatus(r: ProtobufReader, end: number, f: SpanFields): void {
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((2 << 3) | LEN)) {
      f.statusMessage = r.pos;
      r.skip(LEN);
    } else if (t === ((3 << 3) | VARINT)) f.statusCode = r.uint32();
    else r.skip(t & 7);
  }
}

function writeEvent(r: ProtobufReader, end: number, out: ByteColumnBuilder): void {
  let time = '0';
  let name = -1;
  let dropped = 0;
  const attributesStart = out.size;
  let count = 0;
  // Attributes are written first (they may come before the name) and moved into place below.
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | FIXED64)) time = r.fixed64().toString();
    else if (t === ((2 << 3) | LEN)) {
      name = r.pos;
      r.skip(LEN);
    } else if (t === ((3 << 3) | LEN)) {
      out.writeByte(count++ === 0 ? 0x7b : 0x2c);
      writeKeyValue(r, r.lengthDelimited(), out);
    } else if (t === ((4 << 3) | VARINT)) dropped = r.uint32();
    else r.skip(t & 7);
  }
  if (count === 0) out.writeByte(0x7b);
  out.writeByte(0x7d);
  const attributesJson = Buffer.from(out.data.subarray(attributesStart, out.size));
  out.size = attributesStart;
  out.writeAscii(`{"time_unix_nano":"${time}","name":`);
  writeStringAt(r, out, name);
  out.writeAscii(',"attributes":');
  out.writeBytes(attributesJson);
  if (dropped) out.writeAscii(`,"dropped_attributes_count":${dropped}`);
  out.writeByte(0x7d);
  r.pos = end;
}

function writeLink(r: ProtobufReader, end: number, out: ByteColumnBuilder): void {
  const f = { traceId: -1, spanId: -1, traceState: -1 };
  let flags: number | null = null;
  const attributesStart = out.size;
  let count = 0;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN) || t === ((2 << 3) | LEN) || t === ((3 << 3) | LEN)) {
      const field = t >>> 3 === 1 ? 'traceId' : t >>> 3 === 2 ? 'spanId' : 'traceState';
      f[field] = r.pos;
      r.skip(LEN);
    } else if (t === ((4 << 3) | LEN)) {
      out.writeByte(count++ === 0 ? 0x7b : 0x2c);
      writeKeyValue(r, r.lengthDelimited(), out);
    } else if (t === ((6 << 3) | FIXED32)) flags = r.fixed32();
    else r.skip(t & 7);
  }
  if (count === 0) out.writeByte(0x7b);
  out.writeByte(0x7d);
  const attributesJson = Buffer.from(out.data.subarray(attributesStart, out.size));
  out.size = attributesStart;
  out.writeAscii(`{"trace_id":"${idAt(r, f.traceId)}","span_id":"${idAt(r, f.spanId)}","trace_state":`);
  writeStringAt(r, out, f.traceState);
  out.writeAscii(',"attributes":');
  out.writeBytes(attributesJson);
  if (flags !== null) out.writeAscii(`,"flags":${flags}`);
  out.writeByte(0x7d);
  r.pos = end;
}

function readLogRecord(r: ProtobufReader, end: number, group: Group, batch: BatchBuilder): void {
  if (group.rejection !== null) {
    reject(batch, group.rejection);
    return;
  }
  const c = batch.rows.columns;
  const attributes = c[LOG.attributes] as ByteColumnBuilder;
  const body = c[LOG.body] as ByteColumnBuilder;
  const found: Found = { attribution: noAttribution(), serviceName: null };
  let time = -1;
  let observed = -1;
  let traceId = -1;
  let spanId = -1;
  let severityText = -1;
  let eventName = -1;
  let severity: number | null = null;
  let flags: number | null = null;
  let hasBody = false;
  let attributeCount = 0;
  let tooDeep: TooDeepError | null = null;
  try {
    while (r.pos < end) {
      const t = r.tag();
      switch (t) {
        case (1 << 3) | FIXED64: time = r.pos; r.skip(FIXED64); break;
        case (11 << 3) | FIXED64: observed = r.pos; r.skip(FIXED64); break;
        case (2 << 3) | VARINT: severity = r.uint32() | 0; break;
        case (3 << 3) | LEN: severityText = r.pos; r.skip(LEN); break;
        case (5 << 3) | LEN:
          body.discardPartialRow();
          writeBody(r, r.lengthDelimited(), body);
          hasBody = true;
          break;
        case (6 << 3) | LEN:
          attributes.writeByte(attributeCount++ === 0 ? 0x7b : 0x2c);
          writeKeyValue(r, r.lengthDelimited(), attributes, found);
          break;
        case (8 << 3) | FIXED32: flags = r.fixed32() | 0; break;
        case (9 << 3) | LEN: traceId = r.pos; r.skip(LEN); break;
        case (10 << 3) | LEN: spanId = r.pos; r.skip(LEN); break;
        case (12 << 3) | LEN: eventName = r.pos; r.skip(LEN); break;
        default: r.skip(t & 7);
      }
    }
  } catch (error) {
    if (!(error instanceof TooDeepError)) throw error;
    tooDeep = error;
  }
  const trace = traceId < 0 ? null : idAt(r, traceId) || null;
  const span = spanId < 0 ? null : idAt(r, spanId) || null;
  const invalid = tooDeep === null ? invalidLogIds(trace, span) : `log record: ${tooDeep.message}`;
  if (invalid) {
    attributes.discardPartialRow();
    body.discardPartialRow();
    reject(batch, invalid);
    return;
  }
  attributes.writeAscii(attributeCount === 0 ? '{}' : '}');
  attributes.endRow();
  if (hasBody) body.endRow();
  else body.push(null);
  c[LOG.rollout_id].push(found.attribution.rolloutId ?? group.attribution.rolloutId);
  c[LOG.attempt_id].push(found.attribution.attemptId ?? group.attribution.attemptId);
  pushFixed64At(r, c[LOG.time], time);
  pushFixed64At(r, c[LOG.observed_time], observed);
  c[LOG.trace_id].push(trace);
  c[LOG.span_id].push(span);
  c[LOG.severity_number].push(severity);
  pushBytesAt(r, c[LOG.severity_text], severityText, false, true);
  pushBytesAt(r, c[LOG.event_name], eventName, false, true);
  (c[LOG.resource] as ByteColumnBuilder).pushBytes(group.resourceJson);
  pushScope(c[LOG.scope_name] as ByteColumnBuilder, c[LOG.scope_version] as ByteColumnBuilder, group);
  c[LOG.service_name].push(group.serviceName);
  c[LOG.flags].push(flags);
  batch.rows.length++;
}

/** A log record's body, a too deep one named as such. */
function writeBody(r: ProtobufReader, end: number, out: ByteColumnBuilder): void {
  try {
    writeAnyValue(r, end, out, 1);
  } catch (error) {
    throw error instanceof TooDeepError ? new TooDeepError('body') : error;
  }
}

/** What attribute lists of interest to agl say (attribution, service.name). */
interface Found {
  readonly attribution: Attribution;
  serviceName: string | null;
}

type Role = 'rollout' | 'attempt' | 'sequence' | 'service' | null;

interface Key {
  readonly bytes: Buffer;
  /** `"key":` as JSON bytes. */
  readonly json: Buffer;
  readonly text: string;
  readonly role: Role;
}

const ROLES: Record<string, Role> = {
  [ROLLOUT_ID_KEY]: 'rollout',
  [ATTEMPT_ID_KEY]: 'attempt',
  [SEQUENCE_ID_KEY]: 'sequence',
  'service.name': 'service',
};

// Attribute keys repeat in every span: look them up by a hash of their bytes, so that a key
// costs no string and no escaping after its first appearance.
const keyCache = new Map<number, Key[]>();
let cachedKeys = 0;

// The key seen last at each attribute position: spans from one SDK repeat their keys in the same
// order, so most lookups are one byte comparison instead of a hash.
const keyAtPosition: (Key | undefined)[] = [];

function readKey(r: ProtobufReader, end: number, position: number): Key {
  const buf = r.buf;
  const start = r.pos;
  r.pos = end;
  const predicted = keyAtPosition[position];
  if (predicted !== undefined && predicted.bytes.length === end - start && sameBytes(predicted.bytes, buf, start)) return predicted;
  let h = 0x811c9dc5 ^ (end - start);
  for (let i = start; i < end; i++) h = Math.imul(h ^ buf[i], 0x01000193);
  const bucket = keyCache.get(h);
  let key = bucket?.find((k) => k.bytes.length === end - start && sameBytes(k.bytes, buf, start));
  if (key === undefined) {
    const bytes = Buffer.from(buf.subarray(start, end));
    const text = bytes.toString('utf8');
    key = { bytes, json: keyJson(bytes), text, role: ROLES[text] ?? null };
    if (cachedKeys++ > 10_000) {
      keyCache.clear();
      cachedKeys = 0;
    }
    if (bucket) bucket.push(key);
    else keyCache.set(h, [key]);
  }
  if (position < 64) keyAtPosition[position] = key;
  return key;
}

/**
 * `"key":` from the key's own bytes, so that a key with invalid UTF-8 reaches the column as it
 * came and is replaced (and counted) there with the other strings.
 */
function keyJson(bytes: Buffer): Buffer {
  const json = new ByteColumnBuilder();
  json.writeJsonString(bytes, 0, bytes.length);
  json.writeByte(0x3a);
  return Buffer.from(json.data.subarray(0, json.size));
}

function sameBytes(a: Buffer, b: Uint8Array, at: number): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[at + i]) return false;
  return true;
}

const EMPTY_KEY: Key = { bytes: Buffer.alloc(0), json: Buffer.from('"":'), text: '', role: null };

/**
 * A span attribute as it was last seen at one position, and its JSON. Most of a span's attributes
 * repeat in every span an SDK sends (operation, system, model, settings, the attempt), in the
 * same order: when the same bytes come at the same position, their JSON is copied instead of
 * decoded again (decoding small spans: 7.0-8.0 -> 5.3-7.2 us a span, interleaved runs). An entry
 * that has matched stays when an attribute that changes in every span (ids, counts) comes by; one
 * that never matched is replaced after 64 tries, so a new layout takes over.
 */
interface SeenAttribute {
  readonly bytes: Buffer;
  readonly json: Buffer;
  hits: number;
  misses: number;
}

const attributeAtPosition: (SeenAttribute | undefined)[] = [];
/** Longer attributes (texts) are rarely repeated whole: not compared. */
const SEEN_ATTRIBUTE_BYTES = 128;

/** Writes one KeyValue as `"key":value`, noting agl's attribution keys and service.name. */
function writeKeyValue(r: ProtobufReader, end: number, out: ByteColumnBuilder, found?: Found, position = 64, depth = 1): void {
  const start = r.pos;
  const remembered = position < 64 && end - start <= SEEN_ATTRIBUTE_BYTES;
  const seen = remembered ? attributeAtPosition[position] : undefined;
  if (seen !== undefined) {
    if (seen.bytes.length === end - start && sameBytes(seen.bytes, r.buf, start)) {
      seen.hits++;
      out.writeBytes(seen.json);
      r.pos = end;
      return;
    }
    seen.misses++;
  }
  const jsonStart = out.size;
  const key = writeKeyValueOnce(r, end, out, found, position, depth);
  // An attribution key is never remembered: its value must be noted in every span.
  if (remembered && key.role === null && (seen === undefined || seen.hits > 0 || seen.misses > 64)) {
    attributeAtPosition[position] = { bytes: Buffer.from(r.buf.subarray(start, end)), json: Buffer.from(out.data.subarray(jsonStart, out.size)), hits: 0, misses: 0 };
  }
}

/** `depth` is the nesting level of the value: 1 in an attribute list. */
function writeKeyValueOnce(r: ProtobufReader, end: number, out: ByteColumnBuilder, found: Found | undefined, position: number, depth: number): Key {
  let key = EMPTY_KEY; // proto3 leaves an empty key off the wire
  let valueStart = -1;
  let valueEnd = -1;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) key = readKey(r, r.lengthDelimited(), position);
    else if (t === ((2 << 3) | LEN)) {
      valueEnd = r.lengthDelimited();
      valueStart = r.pos;
      r.pos = valueEnd;
    } else r.skip(t & 7);
  }
  out.writeBytes(key.json);
  if (valueStart < 0) {
    out.writeAscii('null');
    return key;
  }
  r.pos = valueStart;
  try {
    writeAnyValue(r, valueEnd, out, depth);
  } catch (error) {
    throw depth === 1 && error instanceof TooDeepError ? new TooDeepError(`attribute ${JSON.stringify(key.text)}`) : error;
  }
  if (found && key.role !== null) {
    r.pos = valueStart;
    const value = scalarValue(r, valueEnd);
    if (key.role === 'service') {
      if (typeof value === 'string') found.serviceName = value;
    } else noteAttribution(found.attribution, key.text, value);
  }
  r.pos = end;
  return key;
}

/**
 * AnyValue as JSON: bytes as base64, int64 exact, NaN and infinities as strings. `depth` is its
 * nesting level; an array or kvlist past MAX_NESTING_DEPTH throws TooDeepError, which also
 * bounds this recursion.
 */
function writeAnyValue(r: ProtobufReader, end: number, out: ByteColumnBuilder, depth: number): void {
  let written = false;
  while (r.pos < end) {
    const t = r.tag();
    if (written) {
      // A oneof set twice: protobuf keeps the last; ours is already written, so skip the rest.
      r.skip(t & 7);
      continue;
    }
    written = true;
    switch (t) {
      case (1 << 3) | LEN: {
        const stringEnd = r.lengthDelimited();
        out.writeJsonString(r.buf, r.pos, stringEnd);
        r.pos = stringEnd;
        break;
      }
      case (2 << 3) | VARINT: out.writeAscii(r.uint32() !== 0 ? 'true' : 'false'); break;
      case (3 << 3) | VARINT: out.writeAscii(r.int64Text()); break;
      case (4 << 3) | FIXED64: {
        const d = r.double();
        out.writeAscii(Number.isFinite(d) ? String(d) : `"${d}"`);
        break;
      }
      case (5 << 3) | LEN: {
        if (depth > MAX_NESTING_DEPTH) throw new TooDeepError('a value');
        const listEnd = r.lengthDelimited();
        let count = 0;
        out.writeByte(0x5b);
        while (r.pos < listEnd) {
          const lt = r.tag();
          if (lt === ((1 << 3) | LEN)) {
            if (count++ > 0) out.writeByte(0x2c);
            writeAnyValue(r, r.lengthDelimited(), out, depth + 1);
          } else r.skip(lt & 7);
        }
        out.writeByte(0x5d);
        break;
      }
      case (6 << 3) | LEN: {
        if (depth > MAX_NESTING_DEPTH) throw new TooDeepError('a value');
        const listEnd = r.lengthDelimited();
        let count = 0;
        out.writeByte(0x7b);
        while (r.pos < listEnd) {
          const lt = r.tag();
          if (lt === ((1 << 3) | LEN)) {
            if (count++ > 0) out.writeByte(0x2c);
            writeKeyValue(r, r.lengthDelimited(), out, undefined, 64, depth + 1);
          } else r.skip(lt & 7);
        }
        out.writeByte(0x7d);
        break;
      }
      case (7 << 3) | LEN: out.writeAscii(`"${r.base64()}"`); break;
      default:
        r.skip(t & 7);
        written = false;
    }
  }
  if (!written) out.writeAscii('null');
}

/** A string or int AnyValue as a JS value (for attribution keys); null for other kinds. */
function scalarValue(r: ProtobufReader, end: number): string | number | null {
  let value: string | number | null = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t === ((1 << 3) | LEN)) value = r.string();
    else if (t === ((3 << 3) | VARINT)) value = Number(r.int64Text());
    else r.skip(t & 7);
  }
  return value;
}

/** The id bytes of the length-delimited field whose value starts at `at`, as lowercase hex. */
function idAt(r: ProtobufReader, at: number): string {
  if (at < 0) return '';
  r.pos = at;
  return r.hex();
}

function stringAt(r: ProtobufReader, at: number): string {
  r.pos = at;
  return r.string();
}

/** Writes the string field at `at` as a JSON string ("" when absent). */
function writeStringAt(r: ProtobufReader, out: ByteColumnBuilder, at: number): void {
  if (at < 0) {
    out.writeAscii('""');
    return;
  }
  r.pos = at;
  const end = r.lengthDelimited();
  out.writeJsonString(r.buf, r.pos, end);
}

/** Pushes the bytes of the field at `at` (hex for ids); absent, or empty when `emptyIsNull`, is NULL. */
function pushBytesAt(r: ProtobufReader, column: ColumnBuilder, at: number, hex: boolean, emptyIsNull = hex): void {
  if (at < 0) {
    column.push(emptyIsNull ? null : '');
    return;
  }
  r.pos = at;
  const end = r.lengthDelimited();
  if (end === r.pos && emptyIsNull) {
    column.push(null);
    return;
  }
  const out = column as ByteColumnBuilder;
  if (hex) for (let i = r.pos; i < end; i++) out.writeAscii(HEX[r.buf[i]]);
  else out.writeBytes(r.buf, r.pos, end);
  out.endRow();
}

/** The scope's name ("" when unnamed) and version (NULL when empty), as OTLP/JSON stores them. */
function pushScope(name: ByteColumnBuilder, version: ByteColumnBuilder, group: Group): void {
  if (group.scopeName === null) name.push(null);
  else name.pushBytes(group.scopeName);
  if (group.scopeVersion === null || group.scopeVersion.length === 0) version.push(null);
  else version.pushBytes(group.scopeVersion);
}

function pushFixed64At(r: ProtobufReader, column: ColumnBuilder, at: number): void {
  if (at < 0) column.push(null as ColumnValue);
  else (column as Int64ColumnBuilder).pushFixed64(r.buf, at);
}

/**
 * Text copied byte for byte must be UTF-8 for DuckDB; protobuf requires it of strings, but a
 * broken exporter may send anything. Such strings are stored with U+FFFD, as OTLP/JSON bodies
 * are; one check per column keeps the common case cheap.
 */
function finishChecked(batch: BatchBuilder): DecodedBatch {
  const decoded = finishBatch(batch);
  let replacedValues = 0;
  const columns = decoded.rows.columns.map((column) => {
    if (Array.isArray(column) || column.kind !== 'bytes' || isUtf8(column.data)) return column;
    const repaired = withValidUtf8(column);
    replacedValues += repaired.replaced;
    return repaired.column;
  });
  return replacedValues === 0 ? decoded : { ...decoded, rows: { length: decoded.rows.length, columns }, replacedValues };
}
