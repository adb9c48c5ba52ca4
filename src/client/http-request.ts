import type { Readable } from 'node:stream';
import { Agent, request } from 'undici';

export interface HttpAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

// One keep-alive pool per process, on undici (which `openai` also uses): a runner makes many small
// requests to one store, and undici costs less CPU per request than node:http or fetch.
const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 256 });

/** One request with a text body; rejects on network errors and after `timeoutMs`. */
export async function httpRequest(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
  timeoutMs: number,
): Promise<HttpAnswer> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const answer = await request(url, { method: method as 'GET', headers, body, signal, dispatcher });
    return { status: answer.statusCode, headers: answer.headers, body: await answer.body.text() };
  } catch (error) {
    if (signal.aborted) throw new Error(`no answer within ${timeoutMs / 1000} s`);
    throw error;
  }
}

export interface HttpStreamAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  /** The body as it comes (undici's readable, with `text()`). */
  readonly body: Readable & { text(): Promise<string> };
}

/**
 * One request whose answer is read as it comes: `timeoutMs` bounds the wait for the answer to
 * start, not its transfer, so that an export larger than memory goes straight to its file.
 */
export async function httpStream(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
): Promise<HttpStreamAnswer> {
  const started = new AbortController();
  const timer = setTimeout(() => started.abort(), timeoutMs);
  try {
    const answer = await request(url, { method: method as 'GET', headers, body, signal: started.signal, dispatcher });
    return { status: answer.statusCode, headers: answer.headers, body: answer.body };
  } catch (error) {
    if (started.signal.aborted) throw new Error(`no answer within ${timeoutMs / 1000} s`);
    throw error;
  } finally {
    clearTimeout(timer);
  }
}
