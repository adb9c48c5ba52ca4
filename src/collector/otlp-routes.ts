import type { IncomingMessage, ServerResponse } from 'node:http';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';
import { BodyError, readBody } from './body.js';
import { mediaType } from './http.js';
import { isDecodeError, type Signal } from '../otlp/decode.js';
import type { DecodePool } from './decode-pool.js';
import { exportResponse, RpcCode, statusResponse, type EncodedBody, type Encoding } from '../otlp/responses.js';
import type { BatchSink } from '../otlp/batch.js';
import { ingestOtlp, REQUEST_MESSAGE } from './otlp-ingest.js';

const ENCODINGS: Record<string, Encoding> = {
  'application/x-protobuf': 'protobuf',
  'application/protobuf': 'protobuf',
  'application/json': 'json',
};

/**
 * The encoding of an OTLP request, or undefined once an unsupported content type got its 415
 * (a text/plain or form post is what a web page can send anywhere without a preflight).
 */
function encodingOf(request: IncomingMessage, response: ServerResponse): Encoding | undefined {
  const type = mediaType(request);
  const encoding = ENCODINGS[type];
  if (encoding === undefined) {
    send(
      response,
      415,
      statusResponse(
        'json',
        RpcCode.INVALID_ARGUMENT,
        `unsupported Content-Type "${type}": OTLP/HTTP takes application/x-protobuf, application/protobuf or application/json`,
      ),
    );
  }
  return encoding;
}

/**
 * POST /v1/traces and /v1/logs (OTLP/HTTP): 200 once the data is committed, with
 * partial_success for rejected items; 400 for an undecodable body, 415 for an unsupported
 * content type; 413 above the size cap; 503 + Retry-After while the write queue is full or the
 * store cannot write (disk full): OTLP exporters retry a 503, and drop the data of a 500.
 */
export async function handleOtlp(
  signal: Signal,
  request: IncomingMessage,
  response: ServerResponse,
  sink: BatchSink,
  decoder: DecodePool,
  maxBodyBytes: number,
): Promise<void> {
  const encoding = encodingOf(request, response);
  if (encoding === undefined) return;
  if (sink.busy) {
    busy(response, encoding, 1);
    return;
  }
  try {
    const body = await readBody(request, maxBodyBytes);
    const { rejected, message } = await ingestOtlp(signal, encoding, body, sink, decoder);
    send(response, 200, exportResponse(encoding, signal, rejected, message));
  } catch (error) {
    if (error instanceof BodyError) {
      send(
        response,
        error.status,
        statusResponse(
          encoding,
          error.status === 413 ? RpcCode.RESOURCE_EXHAUSTED : RpcCode.INVALID_ARGUMENT,
          error.message,
        ),
      );
    } else if (isDecodeError(error)) {
      send(
        response,
        400,
        statusResponse(
          encoding,
          RpcCode.INVALID_ARGUMENT,
          `the body is not a valid ${REQUEST_MESSAGE[signal]}: ${error.message}`,
        ),
      );
    } else if (error instanceof StoreBusyError) {
      busy(response, encoding, error.retryAfterSeconds);
    } else if (error instanceof StoreUnavailableError) {
      send(response, 503, statusResponse(encoding, RpcCode.UNAVAILABLE, error.message), {
        'retry-after': String(error.retryAfterSeconds),
      });
    } else {
      throw error;
    }
  }
}

function busy(response: ServerResponse, encoding: Encoding, seconds: number): void {
  send(
    response,
    503,
    statusResponse(encoding, RpcCode.UNAVAILABLE, `the store is busy writing; retry in ${seconds} s`),
    {
      'retry-after': String(seconds),
    },
  );
}

function send(
  response: ServerResponse,
  status: number,
  { contentType, body }: EncodedBody,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, { 'content-type': contentType, 'content-length': body.length, ...headers });
  response.end(body);
}

/**
 * POST /v1/metrics: agl keeps traces and logs only. Metrics are read and dropped with a 200 and
 * a partial_success message, so that an app exporting all signals to agl's endpoint (the usual
 * OTEL_EXPORTER_OTLP_ENDPOINT setting) does not log an error every export interval.
 */
export async function handleOtlpMetrics(
  request: IncomingMessage,
  response: ServerResponse,
  maxBodyBytes: number,
): Promise<void> {
  const encoding = encodingOf(request, response);
  if (encoding === undefined) return;
  try {
    await readBody(request, maxBodyBytes);
  } catch (error) {
    if (!(error instanceof BodyError)) throw error;
    send(response, error.status, statusResponse(encoding, RpcCode.INVALID_ARGUMENT, error.message));
    return;
  }
  send(response, 200, exportResponse(encoding, 'metrics', 0, 'agl stores traces and logs; metrics are not kept'));
}
