import type { ByteColumnBuilder, ColumnBuilder } from './column-builders.js';
import { invalidLogIds, reject, type BatchBuilder } from './batch.js';
import { TooDeepError } from './nesting.js';
import { LogRecord } from './otlp-proto.js';
import { pushScope, type Group } from './protobuf-groups.js';
import { idAt, pushBytesAt, pushFixed64At } from './protobuf-positions.js';
import type { ProtobufReader } from './protobuf-reader.js';
import { nothingFound, type Found, type ValueWriter } from './protobuf-values.js';
import { FIXED32, FIXED64, LEN, tag, VARINT } from './protobuf-wire.js';
import { LOG } from './span-columns.js';

const LOG_TIME = tag(LogRecord.time_unix_nano, FIXED64);
const LOG_OBSERVED_TIME = tag(LogRecord.observed_time_unix_nano, FIXED64);
const LOG_SEVERITY_NUMBER = tag(LogRecord.severity_number, VARINT);
const LOG_SEVERITY_TEXT = tag(LogRecord.severity_text, LEN);
const LOG_BODY = tag(LogRecord.body, LEN);
const LOG_ATTRIBUTES = tag(LogRecord.attributes, LEN);
const LOG_FLAGS = tag(LogRecord.flags, FIXED32);
const LOG_TRACE_ID = tag(LogRecord.trace_id, LEN);
const LOG_SPAN_ID = tag(LogRecord.span_id, LEN);
const LOG_EVENT_NAME = tag(LogRecord.event_name, LEN);

/**
 * Where a log record's fields are in the request (positions, see protobuf-positions.ts; -1 =
 * absent) and what its body and attributes wrote; the record is written once it is known valid.
 */
interface LogFields {
  time: number;
  observed: number;
  traceId: number;
  spanId: number;
  severityText: number;
  eventName: number;
  severity: number | null;
  flags: number | null;
  hasBody: boolean;
  attributeCount: number;
  /** What the record's own attributes say (attribution). */
  readonly found: Found;
}

/**
 * Reads the opentelemetry.proto.logs.v1.LogRecord that ends at `end` into the batch's columns,
 * or rejects it (ids invalid, a value nested too deep). Its body and attributes are written as
 * JSON while it is walked, and taken back if it is rejected.
 */
export function readLogRecord(
  r: ProtobufReader,
  end: number,
  group: Group,
  batch: BatchBuilder,
  values: ValueWriter,
): void {
  if (group.rejection !== null) {
    reject(batch, group.rejection);
    return;
  }
  const c = batch.rows.columns;
  const f: LogFields = {
    time: -1,
    observed: -1,
    traceId: -1,
    spanId: -1,
    severityText: -1,
    eventName: -1,
    severity: null,
    flags: null,
    hasBody: false,
    attributeCount: 0,
    found: nothingFound(),
  };
  let tooDeep: TooDeepError | null = null;
  try {
    readLogFields(r, end, f, c, values);
  } catch (error) {
    if (!(error instanceof TooDeepError)) throw error;
    tooDeep = error;
  }
  const traceId = f.traceId < 0 ? null : idAt(r, f.traceId) || null;
  const spanId = f.spanId < 0 ? null : idAt(r, f.spanId) || null;
  const invalid = tooDeep === null ? invalidLogIds(traceId, spanId) : `log record: ${tooDeep.message}`;
  if (invalid) {
    (c[LOG.attributes] as ByteColumnBuilder).discardPartialRow();
    (c[LOG.body] as ByteColumnBuilder).discardPartialRow();
    reject(batch, invalid);
    return;
  }
  pushLogRow(r, c, f, group, traceId, spanId);
  batch.rows.length++;
}

/** Walks the record's fields: notes where they are, writes its body and attributes. */
function readLogFields(r: ProtobufReader, end: number, f: LogFields, c: ColumnBuilder[], values: ValueWriter): void {
  const attributes = c[LOG.attributes] as ByteColumnBuilder;
  const body = c[LOG.body] as ByteColumnBuilder;
  while (r.pos < end) {
    const t = r.tag();
    switch (t) {
      case LOG_TIME:
        f.time = r.mark(FIXED64);
        break;
      case LOG_OBSERVED_TIME:
        f.observed = r.mark(FIXED64);
        break;
      case LOG_SEVERITY_NUMBER:
        f.severity = r.uint32() | 0;
        break;
      case LOG_SEVERITY_TEXT:
        f.severityText = r.mark(LEN);
        break;
      case LOG_BODY:
        // A body sent twice: protobuf keeps the last.
        body.discardPartialRow();
        writeBody(r, r.lengthDelimited(), body, values);
        f.hasBody = true;
        break;
      case LOG_ATTRIBUTES:
        attributes.writeByte(f.attributeCount++ === 0 ? 0x7b : 0x2c);
        values.writeKeyValue(r, r.lengthDelimited(), attributes, f.found);
        break;
      case LOG_FLAGS:
        f.flags = r.fixed32() | 0;
        break;
      case LOG_TRACE_ID:
        f.traceId = r.mark(LEN);
        break;
      case LOG_SPAN_ID:
        f.spanId = r.mark(LEN);
        break;
      case LOG_EVENT_NAME:
        f.eventName = r.mark(LEN);
        break;
      default:
        r.skipField(t);
    }
  }
}

/** A log record's body, a too deep one named as such. */
function writeBody(r: ProtobufReader, end: number, out: ByteColumnBuilder, values: ValueWriter): void {
  try {
    values.writeAnyValue(r, end, out, 1);
  } catch (error) {
    throw error instanceof TooDeepError ? new TooDeepError('body') : error;
  }
}

/** Ends the record's body and attributes and pushes its row; its attributes win over the resource's for attribution. */
function pushLogRow(
  r: ProtobufReader,
  c: ColumnBuilder[],
  f: LogFields,
  group: Group,
  traceId: string | null,
  spanId: string | null,
): void {
  const attributes = c[LOG.attributes] as ByteColumnBuilder;
  attributes.writeAscii(f.attributeCount === 0 ? '{}' : '}');
  attributes.endRow();
  if (f.hasBody) (c[LOG.body] as ByteColumnBuilder).endRow();
  else c[LOG.body].push(null);
  const own = f.found.attribution;
  c[LOG.rollout_id].push(own.rolloutId ?? group.attribution.rolloutId);
  c[LOG.attempt_id].push(own.attemptId ?? group.attribution.attemptId);
  pushFixed64At(r, c[LOG.time], f.time);
  pushFixed64At(r, c[LOG.observed_time], f.observed);
  c[LOG.trace_id].push(traceId);
  c[LOG.span_id].push(spanId);
  c[LOG.severity_number].push(f.severity);
  pushBytesAt(r, c[LOG.severity_text], f.severityText, false, true);
  pushBytesAt(r, c[LOG.event_name], f.eventName, false, true);
  (c[LOG.resource] as ByteColumnBuilder).pushBytes(group.resourceJson);
  pushScope(c[LOG.scope_name] as ByteColumnBuilder, c[LOG.scope_version] as ByteColumnBuilder, group);
  c[LOG.service_name].push(group.serviceName);
  c[LOG.flags].push(f.flags);
}
