import type { IncomingMessage } from 'node:http';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

/** A request body refused before decoding: 400 (bad encoding) or 413 (too large). */
export class BodyError extends Error {
  constructor(
    readonly status: 400 | 413,
    message: string,
  ) {
    super(message);
    this.name = 'BodyError';
  }
}

const gunzip = promisify(zlib.gunzip);
const inflate = promisify(zlib.inflate);

/**
 * Reads a request body and undoes its Content-Encoding (gzip, deflate), holding at most
 * `maxBytes` before and after decompression: a larger body, or a gzip bomb, is a 413 instead of
 * an out-of-memory crash. Decompression runs on libuv's thread pool.
 */
export async function readBody(request: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers['content-length'] ?? NaN);
  if (declared > maxBytes) throw tooLarge(maxBytes);
  // Events rather than an async iterator: every request of the server comes through here.
  const { chunks, size } = await new Promise<{ chunks: Buffer[]; size: number }>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    request.on('data', (chunk: Buffer) => {
      if (refused) return;
      size += chunk.length;
      if (size <= maxBytes) chunks.push(chunk);
      else {
        // The 413 goes out now and the rest of the body is read and dropped: cutting the
        // connection would reset it under the client, mostly before it read the answer.
        refused = true;
        chunks.length = 0;
        reject(tooLarge(maxBytes));
      }
    });
    request.once('end', () => resolve({ chunks, size }));
    request.once('error', reject);
    // Before 'end', the client went away mid-body. (Every request closes: the error, and its
    // stack trace, are made only when it matters.)
    request.once('close', () => {
      if (!request.complete)
        reject(new BodyError(400, 'the client closed the connection before the body was complete'));
    });
  });
  const raw = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
  const encoding = (request.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  if (encoding === 'identity' || encoding === '') return raw;
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    throw new BodyError(400, `unsupported Content-Encoding "${encoding}" (use gzip, deflate or none)`);
  }
  try {
    return await (encoding === 'gzip' ? gunzip : inflate)(raw, { maxOutputLength: maxBytes });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(maxBytes);
    throw new BodyError(400, `the body is not valid ${encoding} data: ${(error as Error).message}`);
  }
}

function tooLarge(maxBytes: number): BodyError {
  return new BodyError(
    413,
    `the body is larger than ${maxBytes} bytes (after decompression); send smaller batches or raise --max-body`,
  );
}
