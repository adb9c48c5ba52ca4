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
