import { ATTR } from '../api/semconv.js';
import { buildColumns, columnBuilders, type ColumnBuilder } from './column-builders.js';
import type { Column, ColumnarRows } from './columns.js';
import { LOG, LOG_COLUMNS, SPAN, SPAN_COLUMNS } from './span-columns.js';

/** Rows being built for `spans` or `logs`: one builder per column, in the table's column order. */
interface RowsBuilder {
  length: number;
  /** The table's columns. */
  readonly table: readonly Column[];
  readonly columns: ColumnBuilder[];
}

export const newSpanRows = (): RowsBuilder => ({
  length: 0,
  table: SPAN_COLUMNS,
  columns: columnBuilders(SPAN_COLUMNS),
});
export const newLogRows = (): RowsBuilder => ({ length: 0, table: LOG_COLUMNS, columns: columnBuilders(LOG_COLUMNS) });
/** The rows built; the builder must not be used again. */
export const finishRows = (rows: RowsBuilder): ColumnarRows => ({
  length: rows.length,
  columns: buildColumns(rows.table, rows.columns),
});

/**
 * What both OTLP decoders (protobuf and JSON) produce: rows for the store plus the count and
 * reason of what was rejected, for the response's partial_success. The rules they share
 * (attribution, id validity) live here too; `pushSpan` and `pushLog` serve the JSON decoder,
 * while the protobuf decoder writes its columns byte by byte.
 */
export interface DecodedBatch {
  readonly rows: ColumnarRows;
  readonly rejected: number;
  /** The first rejection's reason, with the total count added by `rejectionMessage`. */
  readonly firstError: string | null;
  /** Stored values (a string, or JSON text of strings) with U+FFFD put for invalid UTF-8 or lone surrogates. */
  readonly replacedValues: number;
}

/** A DecodedBatch while a decoder fills it. */
export interface BatchBuilder {
  readonly rows: RowsBuilder;
  rejected: number;
  firstError: string | null;
  replacedValues: number;
}

export const newSpanBatch = (): BatchBuilder => ({
  rows: newSpanRows(),
  rejected: 0,
  firstError: null,
  replacedValues: 0,
});
export const newLogBatch = (): BatchBuilder => ({
  rows: newLogRows(),
  rejected: 0,
  firstError: null,
  replacedValues: 0,
});
export const finishBatch = ({ rows, rejected, firstError, replacedValues }: BatchBuilder): DecodedBatch => ({
  rows: finishRows(rows),
  rejected,
  firstError,
  replacedValues,
});

export function reject(batch: BatchBuilder, reason: string): void {
  batch.rejected++;
  batch.firstError ??= reason;
}

export function rejectionMessage(batch: DecodedBatch, what: 'spans' | 'log records'): string {
  return batch.rejected === 0 ? '' : `rejected ${batch.rejected} ${what}; first: ${batch.firstError}`;
}

/** Attribution found in one attribute list; null where the list does not say. */
export interface Attribution {
  rolloutId: string | null;
  attemptId: string | null;
  sequenceId: number | null;
}

export const noAttribution = (): Attribution => ({ rolloutId: null, attemptId: null, sequenceId: null });

/** Records an attribute if it is one of agl's attribution keys. */
export function noteAttribution(into: Attribution, key: string, value: string | number | null): void {
  if (value === null || value === '') return;
  if (key === ATTR.rolloutId) into.rolloutId = String(value);
  else if (key === ATTR.attemptId) into.attemptId = String(value);
  else if (key === ATTR.sequenceId) {
    const n = typeof value === 'number' ? value : Number(value);
    if (Number.isSafeInteger(n) && n > 0) into.sequenceId = n;
  }
}

/** The resource (and scope) that spans or log records of one group share. */
export interface ResourceContext {
  /** The resource attributes as JSON object text. */
  readonly resourceJson: string;
  readonly serviceName: string | null;
  readonly attribution: Attribution;
  readonly scopeName: string | null;
  readonly scopeVersion: string | null;
}

export interface DecodedSpan {
  traceId: string;
  spanId: string;
  parentId: string | null;
  traceState: string | null;
  flags: number | null;
  name: string;
  kind: number;
  startTime: bigint | null;
  endTime: bigint | null;
  attributesJson: string;
  eventsJson: string;
  linksJson: string;
  statusCode: number;
  statusMessage: string | null;
  attribution: Attribution;
}

const SPAN_KINDS = ['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT', 'PRODUCER', 'CONSUMER'];
const STATUS_CODES = ['UNSET', 'OK', 'ERROR'];

/** Appends a span; span attributes win over resource attributes for attribution. */
export function pushSpan(rows: RowsBuilder, span: DecodedSpan, context: ResourceContext): void {
  const c = rows.columns;
  const own = span.attribution;
  const res = context.attribution;
  c[SPAN.rollout_id].push(own.rolloutId ?? res.rolloutId);
  c[SPAN.attempt_id].push(own.attemptId ?? res.attemptId);
  c[SPAN.sequence_id].push(own.sequenceId ?? res.sequenceId);
  c[SPAN.trace_id].push(span.traceId);
  c[SPAN.span_id].push(span.spanId);
  c[SPAN.parent_id].push(span.parentId);
  c[SPAN.name].push(span.name);
  c[SPAN.kind].push(SPAN_KINDS[span.kind] ?? 'UNSPECIFIED');
  c[SPAN.start_time].push(span.startTime);
  c[SPAN.end_time].push(span.endTime);
  c[SPAN.status_code].push(STATUS_CODES[span.statusCode] ?? 'UNSET');
  c[SPAN.status_message].push(span.statusMessage);
  c[SPAN.attributes].push(span.attributesJson);
  c[SPAN.events].push(span.eventsJson);
  c[SPAN.links].push(span.linksJson);
  c[SPAN.resource].push(context.resourceJson);
  c[SPAN.scope_name].push(context.scopeName);
  c[SPAN.scope_version].push(context.scopeVersion);
  c[SPAN.service_name].push(context.serviceName);
  c[SPAN.trace_state].push(span.traceState);
  c[SPAN.flags].push(span.flags);
  rows.length++;
}

export interface DecodedLog {
  time: bigint | null;
  observedTime: bigint | null;
  traceId: string | null;
  spanId: string | null;
  severityNumber: number | null;
  severityText: string | null;
  eventName: string | null;
  bodyJson: string | null;
  attributesJson: string;
  flags: number | null;
  attribution: Attribution;
}

export function pushLog(rows: RowsBuilder, log: DecodedLog, context: ResourceContext): void {
  const c = rows.columns;
  c[LOG.rollout_id].push(log.attribution.rolloutId ?? context.attribution.rolloutId);
  c[LOG.attempt_id].push(log.attribution.attemptId ?? context.attribution.attemptId);
  c[LOG.time].push(log.time);
  c[LOG.observed_time].push(log.observedTime);
  c[LOG.trace_id].push(log.traceId);
  c[LOG.span_id].push(log.spanId);
  c[LOG.severity_number].push(log.severityNumber);
  c[LOG.severity_text].push(log.severityText);
  c[LOG.event_name].push(log.eventName);
  c[LOG.body].push(log.bodyJson);
  c[LOG.attributes].push(log.attributesJson);
  c[LOG.resource].push(context.resourceJson);
  c[LOG.scope_name].push(context.scopeName);
  c[LOG.scope_version].push(context.scopeVersion);
  c[LOG.service_name].push(context.serviceName);
  c[LOG.flags].push(log.flags);
  rows.length++;
}

/** OTLP sends 0 for "not set"; anything past int64 cannot be a real time either. */
export function timestampOrNull(nanos: bigint): bigint | null {
  return nanos === 0n || nanos > 0x7fffffffffffffffn ? null : nanos;
}

const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/** Why a span's ids are invalid, or null when they are fine (ids as lowercase hex). */
export function invalidSpanIds(traceId: string | null, spanId: string | null, parentId: string | null): string | null {
  if (traceId === null || traceId.length !== 32 || traceId === ZERO_TRACE_ID) {
    return 'invalid trace_id (must be 16 bytes, not all zero)';
  }
  if (spanId === null || spanId.length !== 16 || spanId === ZERO_SPAN_ID) {
    return 'invalid span_id (must be 8 bytes, not all zero)';
  }
  if (parentId !== null && parentId.length !== 16) return 'invalid parent_span_id (must be empty or 8 bytes)';
  return null;
}

/** Why a log record's ids are invalid (both are optional), or null. */
export function invalidLogIds(traceId: string | null, spanId: string | null): string | null {
  if (traceId !== null && traceId.length !== 32) return 'invalid trace_id (must be empty or 16 bytes)';
  if (spanId !== null && spanId.length !== 16) return 'invalid span_id (must be empty or 8 bytes)';
  return null;
}

/**
 * Where receivers hand decoded batches, as the OpenTelemetry Collector's receivers hand data to a
 * consumer: the OTLP routes and the gateway know this interface, not the store behind it.
 */
export interface BatchSink {
  /** True while the sink sheds load: a receiver answers 503 + Retry-After before reading a body. */
  readonly busy: boolean;
  /** Resolves once the rows are durable; `bytes` (the request's size) counts against the write budget. */
  writeSpans(rows: ColumnarRows, bytes: number): Promise<unknown>;
  writeLogs(rows: ColumnarRows, bytes: number): Promise<unknown>;
}
