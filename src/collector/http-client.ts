import http from 'node:http';
import https from 'node:https';

export interface HttpAnswer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

// One keep-alive pool per process: runners make many small requests to one server, and
// node:http costs a fraction of fetch's CPU per request (measured: the store benchmark's
// clients spent more CPU than the server with fetch).
const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };

/**
 * One request whose answer is read as it arrives (the gateway relays it chunk by chunk);
 * resolves once the answer's headers are in. `signal` aborts it, also while the body streams.
 */
export function httpStream(url: string, method: string, headers: Record<string, string>, body: string | Buffer | undefined, signal?: AbortSignal): Promise<http.IncomingMessage> {
  const target = new URL(url);
  const transport = target.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const request = transport.request(
      target,
      {
        method,
        agent: agents[target.protocol as 'http:' | 'https:'],
        headers: body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) },
        signal,
      },
      resolve,
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** One request with a text body; rejects on network errors and after `timeoutMs`. */
export async function httpRequest(url: string, method: string, headers: Record<string, string>, body: string | Buffer | undefined, timeoutMs: number): Promise<HttpAnswer> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const response = await httpStream(url, method, headers, body, signal);
    const chunks: Buffer[] = [];
    for await (const chunk of response) chunks.push(chunk as Buffer);
    return { status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(chunks).toString('utf8') };
  } catch (error) {
    if (signal.aborted) throw new Error(`no answer within ${timeoutMs / 1000} s`);
    throw error;
  }
}
