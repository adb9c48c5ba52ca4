import { rejectionMessage, type BatchSink } from '../otlp/batch.js';
import type { Signal } from '../otlp/decode.js';
import type { Encoding } from '../otlp/responses.js';
import type { DecodePool } from './decode-pool.js';

/** What an export's answer says: the items rejected and why (OTLP's partial_success). */
interface IngestResult {
  readonly rejected: number;
  readonly message: string;
}

/** The request message of each signal, as error messages name it. */
export const REQUEST_MESSAGE = {
  traces: 'ExportTraceServiceRequest',
  logs: 'ExportLogsServiceRequest',
} as const satisfies Record<Signal, string>;

/**
 * An OTLP export after its transport, the same for OTLP/HTTP and OTLP/gRPC: the body decoded (on
 * a decode thread when large), its rows handed to the sink; resolves once they are durable.
 * Throws a decode error (`isDecodeError`) for a bad body, and what the sink throws when it cannot
 * take the rows now (StoreBusyError, StoreUnavailableError). `wholeBuffer`: see DecodePool.decode.
 */
export async function ingestOtlp(
  signal: Signal,
  encoding: Encoding,
  body: Buffer,
  sink: BatchSink,
  decoder: DecodePool,
  wholeBuffer = false,
): Promise<IngestResult> {
  // Read before decoding: the body's memory may move to the decode thread.
  const bytes = body.length;
  const batch = await decoder.decode(signal, encoding, body, wholeBuffer);
  if (batch.replacedValues > 0) {
    console.warn(
      `agl: invalid Unicode replaced with U+FFFD in ${batch.replacedValues} value(s) of a ${signal} request (${encoding})`,
    );
  }
  if (signal === 'traces') await sink.writeSpans(batch.rows, bytes);
  else await sink.writeLogs(batch.rows, bytes);
  return {
    rejected: batch.rejected,
    message: rejectionMessage(batch, signal === 'traces' ? 'spans' : 'log records'),
  };
}
