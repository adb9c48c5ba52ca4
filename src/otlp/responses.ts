import { ExportPartialSuccess, ExportServiceResponse, RpcStatus } from './otlp-proto.js';
import { LEN, tag, VARINT } from './protobuf-wire.js';

/**
 * OTLP/HTTP responses, in the encoding of the request: Export{Trace,Logs}ServiceResponse for
 * success and google.rpc.Status for errors (field numbers from the OTLP and googleapis protos).
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
