import { decodeLogsJson, decodeTracesJson, OtlpJsonError } from './json-decoder.js';
import { ProtobufDecoder } from './protobuf-decoder.js';
import type { Encoding } from './responses.js';
import type { DecodedBatch } from './batch.js';
import { ProtobufError } from './protobuf-reader.js';

export type Signal = 'traces' | 'logs';

/**
 * Decodes OTLP request bodies of either signal and encoding. The protobuf decoder keeps what
 * its requests repeat from one to the next (protobuf-values.ts): whoever decodes a stream of
 * requests (a decode thread, DecodePool on its own thread) keeps one OtlpDecoder.
 */
export class OtlpDecoder {
  private readonly protobuf = new ProtobufDecoder();

  /** Throws ProtobufError or OtlpJsonError for a bad body. */
  decode(signal: Signal, encoding: Encoding, body: Buffer): DecodedBatch {
    if (encoding === 'json')
      return signal === 'traces' ? decodeTracesJson(body.toString('utf8')) : decodeLogsJson(body.toString('utf8'));
    return signal === 'traces' ? this.protobuf.decodeTraces(body) : this.protobuf.decodeLogs(body);
  }
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
