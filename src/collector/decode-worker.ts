import { parentPort } from 'node:worker_threads';
import { transferables } from '../otlp/columns.js';
import { decodeOtlp, type Signal } from '../otlp/decode.js';
import type { Encoding } from '../otlp/responses.js';

/** A decode thread of DecodePool: request bodies in, column buffers out (transferred, not copied). */
export interface DecodeRequest {
  readonly id: number;
  readonly signal: Signal;
  readonly encoding: Encoding;
  readonly body: Uint8Array;
}

parentPort!.on('message', ({ id, signal, encoding, body }: DecodeRequest) => {
  try {
    const batch = decodeOtlp(signal, encoding, Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    parentPort!.postMessage({ id, batch }, transferables(batch.rows));
  } catch (error) {
    const { name, message } = error as Error;
    parentPort!.postMessage({ id, error: { name, message } });
  }
});
