import { Worker } from 'node:worker_threads';
import { decodeErrorFromName, OtlpDecoder, type Signal } from '../otlp/decode.js';
import type { DecodeRequest } from './decode-worker.js';
import type { Encoding } from '../otlp/responses.js';
import type { DecodedBatch } from '../otlp/batch.js';

interface Pending {
  readonly resolve: (batch: DecodedBatch) => void;
  readonly reject: (error: Error) => void;
}

/** What decode-worker.ts posts back: the batch, or the error by name (errors do not cross threads whole). */
type DecodeAnswer =
  | { readonly id: number; readonly batch: DecodedBatch }
  | { readonly id: number; readonly error: { name: string; message: string } };

interface DecodeThread {
  readonly worker: Worker;
  readonly pending: Map<number, Pending>;
}

/** Bodies below this are decoded on the calling thread: a round trip would cost more. */
const INLINE_BYTES = 32 * 1024;

/**
 * Decodes OTLP bodies on worker threads, so that the event loop is left to HTTP and the
 * DuckDB writer and a second core does the decoding. Bodies and decoded columns move between
 * threads as transferred buffers. With `threads` 0 everything is decoded inline.
 */
export class DecodePool {
  private readonly threads: DecodeThread[] = [];
  /** For the bodies decoded on the calling thread. */
  private readonly inline = new OtlpDecoder();
  private nextId = 1;
  private closing = false;

  constructor(threads: number) {
    for (let i = 0; i < threads; i++) this.threads.push(this.startThread());
  }

  /**
   * A thread that dies (a crash, an exit) fails what it held and is replaced at once: bodies
   * sent to a dead worker would never be answered, and their requests would hang.
   */
  private startThread(): DecodeThread {
    const worker = new Worker(new URL('./decode-worker.js', import.meta.url));
    const thread: DecodeThread = { worker, pending: new Map() };
    worker.on('message', (message: DecodeAnswer) => {
      const pending = thread.pending.get(message.id);
      thread.pending.delete(message.id);
      if ('error' in message) pending?.reject(decodeErrorFromName(message.error.name, message.error.message));
      else pending?.resolve(message.batch);
    });
    const fail = (error: Error) => {
      for (const pending of thread.pending.values()) pending.reject(error);
      thread.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      fail(new Error(`an OTLP decode thread stopped (exit code ${code})`));
      const index = this.threads.indexOf(thread);
      if (index >= 0 && !this.closing) this.threads[index] = this.startThread();
    });
    return thread;
  }

  /**
   * `wholeBuffer`: the caller hands over all of `body.buffer` (nothing else uses it), so that it
   * moves to a decode thread without a copy even when `body` is a view into part of it.
   */
  decode(signal: Signal, encoding: Encoding, body: Buffer, wholeBuffer = false): Promise<DecodedBatch> {
    if (this.threads.length === 0 || body.length < INLINE_BYTES) {
      try {
        return Promise.resolve(this.inline.decode(signal, encoding, body));
      } catch (error) {
        return Promise.reject(error);
      }
    }
    const thread = this.threads.reduce((a, b) => (b.pending.size < a.pending.size ? b : a));
    // Transfer the body when it owns its memory; a slice of a shared pool must be copied.
    const owned =
      wholeBuffer || (body.byteOffset === 0 && body.buffer.byteLength === body.length) ? body : Buffer.from(body);
    const id = this.nextId++;
    return new Promise<DecodedBatch>((resolve, reject) => {
      thread.pending.set(id, { resolve, reject });
      const request: DecodeRequest = { id, signal, encoding, body: owned };
      thread.worker.postMessage(request, [owned.buffer as ArrayBuffer]);
    });
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.threads.map((t) => t.worker.terminate()));
  }
}
