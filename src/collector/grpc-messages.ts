import { Metadata, status, type MethodDefinition, type ServiceDefinition, type StatusObject } from '@grpc/grpc-js';
import { retryInfo, retryStatus } from '../otlp/responses.js';
import type { Signal } from '../otlp/decode.js';

/**
 * The OTLP/gRPC services as grpc-js service definitions, without .proto files: an Export request
 * reaches its handler as the raw protobuf bytes, for agl's own decoder (the same one as
 * OTLP/HTTP's), and its response is the bytes responses.ts encodes.
 */
const bytes = (value: Buffer): Buffer => value;

function unaryBytes(path: string): MethodDefinition<Buffer, Buffer> {
  return {
    path,
    requestStream: false,
    responseStream: false,
    requestSerialize: bytes,
    requestDeserialize: bytes,
    responseSerialize: bytes,
    responseDeserialize: bytes,
  };
}

/** opentelemetry.proto.collector.{trace,logs}.v1's service of each signal, by its full name. */
export const OTLP_SERVICES = {
  traces: {
    name: 'opentelemetry.proto.collector.trace.v1.TraceService',
    definition: { Export: unaryBytes('/opentelemetry.proto.collector.trace.v1.TraceService/Export') },
  },
  logs: {
    name: 'opentelemetry.proto.collector.logs.v1.LogsService',
    definition: { Export: unaryBytes('/opentelemetry.proto.collector.logs.v1.LogsService/Export') },
  },
} as const satisfies Record<Signal, { name: string; definition: ServiceDefinition }>;

/** The Export methods' paths, which the admission check tells apart from the health service's. */
export const EXPORT_PATHS: ReadonlySet<string> = new Set(
  Object.values(OTLP_SERVICES).map((service) => service.definition.Export.path),
);

/** A gRPC status a handler or the admission check answers with. */
export type GrpcStatus = Pick<StatusObject, 'code' | 'details'> & { readonly metadata?: Metadata };

/**
 * UNAVAILABLE with the delay after which to retry, in the three places exporters look for it:
 * `grpc-status-details-bin` (a google.rpc.Status holding a google.rpc.RetryInfo: the Go SDK and
 * the OpenTelemetry Collector), `google.rpc.retryinfo-bin` (the RetryInfo alone: the Python SDK)
 * and `grpc-retry-pushback-ms` (gRPC's own retry policy, which grpc-js and grpc-java clients
 * configured with one follow). OTLP reads UNAVAILABLE as "retry": an exporter retries it with
 * its own backoff when it finds no delay.
 */
export function retryLater(details: string, seconds: number): GrpcStatus {
  const metadata = new Metadata();
  metadata.set('grpc-status-details-bin', retryStatus(status.UNAVAILABLE, details, seconds));
  metadata.set('google.rpc.retryinfo-bin', retryInfo(seconds));
  metadata.set('grpc-retry-pushback-ms', String(Math.round(seconds * 1000)));
  return { code: status.UNAVAILABLE, details, metadata };
}
