/**
 * The field numbers of the OTLP messages agl reads and writes, by their names in the .proto
 * files (github.com/open-telemetry/opentelemetry-proto, opentelemetry/proto/.../v1/*.proto, and
 * google/rpc/status.proto). Only the numbers: a field's wire type follows from its .proto type,
 * and the codecs name it where they make a tag (`tag(Span.name, LEN)`). A number is forever in
 * protobuf, so these never change; messages and fields agl has no use for are left out.
 */

/** opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest */
export const ExportTraceServiceRequest = { resource_spans: 1 } as const;

/** opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest */
export const ExportLogsServiceRequest = { resource_logs: 1 } as const;

/**
 * opentelemetry.proto.collector.{trace,logs,metrics}.v1.Export{Trace,Logs,Metrics}ServiceResponse:
 * the three have the same one field.
 */
export const ExportServiceResponse = { partial_success: 1 } as const;

/**
 * opentelemetry.proto.collector.{trace,logs,metrics}.v1.Export{Trace,Logs,Metrics}PartialSuccess:
 * field 1 is rejected_spans, rejected_log_records or rejected_data_points.
 */
export const ExportPartialSuccess = { rejected: 1, error_message: 2 } as const;

/** google.rpc.Status, the body of an OTLP/HTTP error response and OTLP/gRPC's grpc-status-details-bin. */
export const RpcStatus = { code: 1, message: 2, details: 3 } as const;

/** google.protobuf.Any, a detail of a google.rpc.Status. */
export const ProtoAny = { type_url: 1, value: 2 } as const;

/** google.rpc.RetryInfo (google/rpc/error_details.proto): when a throttled client may retry. */
export const RetryInfo = { retry_delay: 1 } as const;

/** google.protobuf.Duration */
export const Duration = { seconds: 1, nanos: 2 } as const;

/** opentelemetry.proto.trace.v1.ResourceSpans */
export const ResourceSpans = { resource: 1, scope_spans: 2, schema_url: 3 } as const;

/** opentelemetry.proto.logs.v1.ResourceLogs */
export const ResourceLogs = { resource: 1, scope_logs: 2, schema_url: 3 } as const;

/** opentelemetry.proto.trace.v1.ScopeSpans */
export const ScopeSpans = { scope: 1, spans: 2, schema_url: 3 } as const;

/** opentelemetry.proto.logs.v1.ScopeLogs */
export const ScopeLogs = { scope: 1, log_records: 2, schema_url: 3 } as const;

/** opentelemetry.proto.resource.v1.Resource */
export const Resource = { attributes: 1, dropped_attributes_count: 2 } as const;

/** opentelemetry.proto.common.v1.InstrumentationScope */
export const InstrumentationScope = { name: 1, version: 2, attributes: 3, dropped_attributes_count: 4 } as const;

/** opentelemetry.proto.common.v1.KeyValue */
export const KeyValue = { key: 1, value: 2 } as const;

/** opentelemetry.proto.common.v1.AnyValue: a oneof, one of these is set. */
export const AnyValue = {
  string_value: 1,
  bool_value: 2,
  int_value: 3,
  double_value: 4,
  array_value: 5,
  kvlist_value: 6,
  bytes_value: 7,
} as const;

/** opentelemetry.proto.common.v1.ArrayValue */
export const ArrayValue = { values: 1 } as const;

/** opentelemetry.proto.common.v1.KeyValueList */
export const KeyValueList = { values: 1 } as const;

/** opentelemetry.proto.trace.v1.Span */
export const Span = {
  trace_id: 1,
  span_id: 2,
  trace_state: 3,
  parent_span_id: 4,
  name: 5,
  kind: 6,
  start_time_unix_nano: 7,
  end_time_unix_nano: 8,
  attributes: 9,
  dropped_attributes_count: 10,
  events: 11,
  dropped_events_count: 12,
  links: 13,
  dropped_links_count: 14,
  status: 15,
  flags: 16,
} as const;

/** opentelemetry.proto.trace.v1.Span.Event */
export const SpanEvent = { time_unix_nano: 1, name: 2, attributes: 3, dropped_attributes_count: 4 } as const;

/** opentelemetry.proto.trace.v1.Span.Link */
export const SpanLink = {
  trace_id: 1,
  span_id: 2,
  trace_state: 3,
  attributes: 4,
  dropped_attributes_count: 5,
  flags: 6,
} as const;

/** opentelemetry.proto.trace.v1.Status (field 1 is reserved). */
export const Status = { message: 2, code: 3 } as const;

/** opentelemetry.proto.logs.v1.LogRecord (field 4 is reserved). */
export const LogRecord = {
  time_unix_nano: 1,
  severity_number: 2,
  severity_text: 3,
  body: 5,
  attributes: 6,
  dropped_attributes_count: 7,
  flags: 8,
  trace_id: 9,
  span_id: 10,
  observed_time_unix_nano: 11,
  event_name: 12,
} as const;
