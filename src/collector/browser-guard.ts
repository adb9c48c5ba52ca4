import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIPv4 } from 'node:net';
import { sendJson } from './http.js';

/** This machine's own names and addresses: localhost (and its subdomains), 127.0.0.0/8, ::1. */
export function isLoopbackHost(name: string): boolean {
  const host = name.toLowerCase();
  return (
    host === 'localhost' || host.endsWith('.localhost') || host === '::1' || (host.startsWith('127.') && isIPv4(host))
  );
}

/** The name in a Host header, without its port and brackets ("[::1]:4318" is "::1"). */
export function hostName(header: string): string {
  if (header.startsWith('[')) {
    const end = header.indexOf(']');
    return header.slice(1, end === -1 ? undefined : end);
  }
  const colon = header.lastIndexOf(':');
  return colon === -1 ? header : header.slice(0, colon);
}

/** An http(s) origin as browsers send it ("http://localhost:3000"); undefined for anything else. */
export function parseOrigin(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    return undefined;
  }
  const bare =
    url.pathname === '/' && url.search === '' && url.hash === '' && url.username === '' && url.password === '';
  return (url.protocol === 'http:' || url.protocol === 'https:') && bare ? url.origin : undefined;
}

interface BrowserGuardOptions {
  /** The address the server listens on: on a loopback one, only loopback Host names are answered. */
  readonly host: string;
  /** Origins whose pages may call the server (CORS), as "http://localhost:3000". */
  readonly allowOrigins?: readonly string[];
}

/** Request headers an allowed page may send when its preflight names none we can echo. */
const ALLOWED_HEADERS = 'content-type, content-encoding, authorization, traceparent, tracestate';
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9a-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9a-z-]+)*$/i;

/**
 * Keeps web pages from driving the server: any page the user visits can make the browser send
 * a request to 127.0.0.1, so a request from a page (it carries an Origin, or Sec-Fetch-Site:
 * cross-site) is answered only for the server's own origin or one of `allowOrigins`, which also
 * get CORS; on a loopback address, a Host that is not a loopback name (a DNS-rebound page) is
 * a 421. Returns false when it answered the request itself (a refusal or a CORS preflight).
 * Requests from programs carry neither header: they cost three header reads and the Host check
 * here (OTLP ingest and the gateway are the hot paths).
 */
export function browserGuard(
  options: BrowserGuardOptions,
): (request: IncomingMessage, response: ServerResponse) => boolean {
  const checkHost = isLoopbackHost(options.host);
  const allowed = new Set(
    (options.allowOrigins ?? []).map((origin) => {
      const parsed = parseOrigin(origin);
      if (parsed === undefined) throw new Error(`"${origin}" is not an origin such as http://localhost:3000`);
      return parsed;
    }),
  );
  // Clients send the same Host on every request: the one last found loopback is not parsed again
  // (its IPv4 check was about 1% of the gateway's CPU per call).
  let loopbackHost = '';
  const isLoopbackHeader = (host: string) => {
    if (host === loopbackHost) return true;
    const loopback = isLoopbackHost(hostName(host));
    if (loopback) loopbackHost = host;
    return loopback;
  };
  return (request, response) => {
    const { host, origin } = request.headers;
    if (checkHost && host !== undefined && !isLoopbackHeader(host)) {
      sendJson(response, 421, {
        detail: `this agl server listens on a loopback address and answers only to loopback names, not to Host "${host}"`,
      });
      return false;
    }
    const site = request.headers['sec-fetch-site'];
    if (origin === undefined && site !== 'cross-site') return true;
    if (origin !== undefined && allowed.has(origin.toLowerCase())) return allowCors(request, response, origin);
    if (origin !== undefined && origin.toLowerCase() !== `http://${host?.toLowerCase()}`) {
      refuse(response, `requests from the web page origin ${origin} are refused`, `--allow-origin ${origin}`);
      return false;
    }
    if (site === 'cross-site') {
      refuse(
        response,
        'cross-site requests (Sec-Fetch-Site: cross-site) are refused',
        '--allow-origin <the page origin>',
      );
      return false;
    }
    return true;
  };
}

function refuse(response: ServerResponse, what: string, flag: string): void {
  sendJson(response, 403, {
    detail: `${what}: a web page must not drive agl; to let one, start agl serve with ${flag}`,
  });
}

/** CORS for an allowed origin: its preflight is answered here, its requests go on. */
function allowCors(request: IncomingMessage, response: ServerResponse, origin: string): boolean {
  response.setHeader('access-control-allow-origin', origin);
  // The OTel browser exporter posts with sendBeacon when it has no headers to set, and a
  // beacon always goes with credentials. agl reads no cookies: they give an allowed page nothing.
  response.setHeader('access-control-allow-credentials', 'true');
  response.setHeader('vary', 'Origin');
  if (request.method !== 'OPTIONS' || request.headers['access-control-request-method'] === undefined) return true;
  // Preflights carry no Authorization (browsers never send it on them): answered before the token check.
  const asked = request.headers['access-control-request-headers'];
  response.writeHead(204, {
    'access-control-allow-methods': 'GET, POST',
    'access-control-allow-headers': asked !== undefined && HEADER_LIST.test(asked) ? asked : ALLOWED_HEADERS,
    'access-control-max-age': '600',
  });
  response.end();
  return false;
}
