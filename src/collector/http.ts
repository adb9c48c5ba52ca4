import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { replaceLoneSurrogates } from '../otlp/well-formed.js';
import { readBody } from './body.js';

/** A client error with its HTTP status; the message is sent to the client as is. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

export function sendJson(
  response: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const body = JSON.stringify(value);
  response.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  response.end(body);
}

/**
 * Reads a JSON object body (REST routes), naming what is wrong with it. With `orEmpty`, an empty
 * body or `null` is {} (Agent Lightning's clients send those for defaults).
 */
export async function readJsonObject(
  request: IncomingMessage,
  maxBytes: number,
  { orEmpty = false } = {},
): Promise<Record<string, unknown>> {
  const value = await readJson(request, maxBytes, { orEmpty });
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw new HttpError(400, 'the body must be a JSON object');
  return value as Record<string, unknown>;
}

/** Reads a JSON body of any shape (Agent Lightning v1 posts lists); with `orEmpty`, an empty body or `null` is {}. */
export async function readJson(request: IncomingMessage, maxBytes: number, { orEmpty = false } = {}): Promise<unknown> {
  const text = (await readBody(request, maxBytes)).toString('utf8');
  if (orEmpty && /^\s*(null\s*)?$/.test(text)) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, `the body is not JSON: ${(error as Error).message}`);
  }
  // What is stored must read back: lone surrogates (an escape such as \ud800) become U+FFFD.
  replaceLoneSurrogates(text, value);
  return value;
}

/** The media type of a request without parameters, lowercased ("application/json"). */
export function mediaType(request: IncomingMessage): string {
  return (request.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
}

/** Whether an Authorization header holds `Bearer <token>`, compared in constant time (digests of equal length, whatever was sent). */
export function bearerCheck(token: string): (header: string | undefined) => boolean {
  const expected = createHash('sha256').update(token).digest();
  return (header) => {
    const sent = /^Bearer\s+(.+)$/i.exec(header ?? '')?.[1] ?? '';
    return timingSafeEqual(createHash('sha256').update(sent).digest(), expected);
  };
}

/**
 * Whether a request's body is declared JSON, or is absent (no Content-Length or 0, not chunked)
 * whatever its Content-Type says. A page can make a browser post text/plain or a form anywhere
 * with no preflight: JSON takes one. An empty body passes as it is labelled: Agent Lightning's
 * Python client (aiohttp) posts `start_attempt` and `update_worker` with no body as
 * application/octet-stream; there is nothing in it to smuggle, and a page's post still carries
 * an Origin, which the browser guard answers first.
 */
export function isJsonOrEmpty(request: IncomingMessage): boolean {
  const { 'content-length': length, 'transfer-encoding': chunked } = request.headers;
  if (chunked === undefined && (length === undefined || length === '0')) return true;
  return mediaType(request) === 'application/json';
}

/** One REST route: a method, a path with {param} segments, and what answers it. */
export interface Route {
  readonly method: string;
  readonly path: string;
  readonly handle: (request: IncomingMessage, response: ServerResponse, params: string[]) => Promise<void>;
}
