import { decodeLogsJson, decodeTracesJson, OtlpJsonError } from './json-decoder.js';
import { decodeLogsProtobuf, decodeTracesProtobuf } from './protobuf-decoder.js';
import type { Encoding } from './responses.js';
import type { DecodedBatch } from './batch.js';
import { ProtobufError } from './protobuf-reader.js';

export type Signal = 'traces' | 'logs';

const DECODERS: Record<Signal, Record<Encoding, (body: Buffer) => DecodedBatch>> = {
  traces: { protobuf: decodeTracesProtobuf, json: (body) => decodeTracesJson(body.toString('utf8')) },
  logs: { protobuf: decodeLogsProtobuf, json: (body) => decodeLogsJson(body.toString('utf8')) },
};

/** Decodes one OTLP request body; throws ProtobufError or OtlpJsonError for a bad one. */
export function decodeOtlp(signal: Signal, encoding: Encoding, body: Buffer): DecodedBatch {
  return DECODERS[signal][encoding](body);
}

/** Errors that mean "bad request", by name, so that they survive a trip between threads. */
export function isDecodeError(error: unknown): error is ProtobufError | OtlpJsonError {
  return error instanceof ProtobufError || error instanceof OtlpJsonError;
}

export function decodeErrorFromName(name: string, message: string): Error {
  if (name === 'ProtobufError') return new ProtobufError(message);
  if (name === 'OtlpJsonError') return new OtlpJsonError(message);
  return new Error(message);
}
