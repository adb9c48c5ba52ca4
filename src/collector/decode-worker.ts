import { parentPort } from 'node:worker_threads';
import { transferables } from '../otlp/columns.js';
import { OtlpDecoder, type Signal } from '../otlp/decode.js';
import type { Encoding } from '../otlp/responses.js';

/** A decode thread of DecodePool: request bodies in, column buffers out (transferred, not copied). */
export interface DecodeRequest {
  readonly id: number;
  readonly signal: Signal;
  readonly encoding: Encoding;
  readonly body: Uint8Array;
}

const port = parentPort;
if (!port) throw new Error('decode-worker.js runs as a worker thread of DecodePool');

/** This thread's decoder: it learns what the requests it decodes repeat. */
const decoder = new OtlpDecoder();

port.on('message', ({ id, signal, encoding, body }: DecodeRequest) => {
  try {
    const batch = decoder.decode(signal, encoding, Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    port.postMessage({ id, batch }, transferables(batch.rows));
  } catch (error) {
    const { name, message } = error as Error;
    port.postMessage({ id, error: { name, message } });
  }
});
