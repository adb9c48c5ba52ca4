import { Duration, ExportPartialSuccess, ExportServiceResponse, ProtoAny, RetryInfo, RpcStatus } from './otlp-proto.js';
import { LEN, tag, VARINT } from './protobuf-wire.js';

/**
 * OTLP responses: for OTLP/HTTP in the encoding of the request, Export{Trace,Logs}ServiceResponse
 * for success and google.rpc.Status for errors; for OTLP/gRPC the protobuf response and the
 * RetryInfo of a throttled export (field numbers from the OTLP and googleapis protos).
 */
export type Encoding = 'protobuf' | 'json';

export interface EncodedBody {
  readonly contentType: string;
  readonly body: Buffer;
}

const REJECTED_FIELD = { traces: 'rejectedSpans', logs: 'rejectedLogRecords', metrics: 'rejectedDataPoints' } as const;

export function exportResponse(
  encoding: Encoding,
  signal: 'traces' | 'logs' | 'metrics',
  rejected: number,
  message: string,
): EncodedBody {
  if (encoding === 'json') {
    const countField = REJECTED_FIELD[signal];
    const body =
      rejected === 0 && message === ''
        ? {}
        : { partialSuccess: { [countField]: String(rejected), errorMessage: message } };
    return json(body);
  }
  if (rejected === 0 && message === '') return protobuf(Buffer.alloc(0));
  const partialSuccess = Buffer.concat([
    varintField(ExportPartialSuccess.rejected, rejected),
    lengthDelimited(ExportPartialSuccess.error_message, Buffer.from(message)),
  ]);
  return protobuf(lengthDelimited(ExportServiceResponse.partial_success, partialSuccess));
}

/** google.rpc.Code values used here. */
export const RpcCode = {
  INVALID_ARGUMENT: 3,
  RESOURCE_EXHAUSTED: 8,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

export function statusResponse(encoding: Encoding, code: number, message: string): EncodedBody {
  if (encoding === 'json') return json({ code, message });
  return protobuf(
    Buffer.concat([varintField(RpcStatus.code, code), lengthDelimited(RpcStatus.message, Buffer.from(message))]),
  );
}

/** google.rpc.RetryInfo asking for a retry after `seconds`. */
export function retryInfo(seconds: number): Buffer {
  const whole = Math.floor(seconds);
  const nanos = Math.round((seconds - whole) * 1e9);
  const delay = Buffer.concat([
    whole > 0 ? varintField(Duration.seconds, whole) : Buffer.alloc(0),
    nanos > 0 ? varintField(Duration.nanos, nanos) : Buffer.alloc(0),
  ]);
  return lengthDelimited(RetryInfo.retry_delay, delay);
}

const RETRY_INFO_TYPE = Buffer.from('type.googleapis.com/google.rpc.RetryInfo');

/** google.rpc.Status whose one detail is a RetryInfo (an Any): what gRPC's grpc-status-details-bin carries. */
export function retryStatus(code: number, message: string, seconds: number): Buffer {
  const detail = Buffer.concat([
    lengthDelimited(ProtoAny.type_url, RETRY_INFO_TYPE),
    lengthDelimited(ProtoAny.value, retryInfo(seconds)),
  ]);
  return Buffer.concat([
    varintField(RpcStatus.code, code),
    lengthDelimited(RpcStatus.message, Buffer.from(message)),
    lengthDelimited(RpcStatus.details, detail),
  ]);
}

const json = (value: unknown): EncodedBody => ({
  contentType: 'application/json',
  body: Buffer.from(JSON.stringify(value)),
});
const protobuf = (body: Buffer): EncodedBody => ({ contentType: 'application/x-protobuf', body });

function varint(value: number): Buffer {
  const bytes: number[] = [];
  while (value > 0x7f) {
    bytes.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  bytes.push(value);
  return Buffer.from(bytes);
}

const varintField = (field: number, value: number) => Buffer.concat([varint(tag(field, VARINT)), varint(value)]);
const lengthDelimited = (field: number, bytes: Buffer) =>
  Buffer.concat([varint(tag(field, LEN)), varint(bytes.length), bytes]);
