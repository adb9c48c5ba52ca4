import { readFile, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { dirname, extname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sendJson } from './http.js';

/** Where `npm run build` puts the dashboard (vite's output), beside the compiled server: dist/dashboard. */
export const DASHBOARD_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dashboard');

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * The page may load only its own scripts and styles and talk only to its own server; no page may
 * frame it (clickjacking). uPlot and Preact set styles through the CSSOM, which style-src does
 * not govern; CSV and Parquet downloads are blob: URLs.
 */
const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; " +
  "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

/**
 * Serves the dashboard's files from `root` for GET and HEAD of any path outside /v1/:
 * - the file at the path, when there is one: files under /assets/ carry a content hash in their
 *   names (vite), so they are cached for a year; the others (index.html) are revalidated each
 *   time by their ETag;
 * - index.html for any other path without a file extension (the dashboard's own routes, such as
 *   /rollouts/ro-1, which the page reads from its URL);
 * - a 404 for a missing file with an extension (a script must never be answered with HTML).
 * A path with `..`, a backslash or a NUL in it is refused before the file system is asked.
 */
export function staticFiles(
  root: string,
): (request: IncomingMessage, response: ServerResponse, path: string) => Promise<void> {
  return async (request, response, path) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      sendJson(response, 405, { detail: `${request.method} is not allowed on ${path}` }, { allow: 'GET, HEAD' });
      return;
    }
    const relative = safeRelativePath(path);
    if (relative === undefined) {
      sendJson(response, 400, { detail: `the path ${path} is not one the dashboard serves` });
      return;
    }
    const file =
      (await fileAt(root, relative)) ?? (extname(relative) === '' ? await fileAt(root, 'index.html') : undefined);
    if (file === undefined) {
      const built = (await fileAt(root, 'index.html')) !== undefined;
      sendJson(response, 404, {
        detail: built ? `no file ${path}` : 'the dashboard is not built: run npm run build (it writes dist/dashboard)',
      });
      return;
    }
    await answerFile(request, response, file);
  };
}

interface FoundFile {
  readonly path: string;
  readonly relative: string;
  readonly size: number;
  readonly etag: string;
}

/** The path's segments decoded and checked; undefined for one that could leave the root. */
function safeRelativePath(path: string): string | undefined {
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return undefined;
  }
  if (decoded.includes('\\') || decoded.includes('\0')) return undefined;
  const segments = decoded.split('/').filter((segment) => segment !== '' && segment !== '.');
  if (segments.some((segment) => segment === '..')) return undefined;
  return segments.length === 0 ? 'index.html' : segments.join('/');
}

async function fileAt(root: string, relative: string): Promise<FoundFile | undefined> {
  const path = join(root, relative);
  // safeRelativePath keeps out `..`; this is the second lock on the same door.
  if (!path.startsWith(root.endsWith(sep) ? root : root + sep)) return undefined;
  try {
    const info = await stat(path);
    if (!info.isFile()) return undefined;
    return {
      path,
      relative,
      size: info.size,
      etag: `"${info.size.toString(36)}-${Math.trunc(info.mtimeMs).toString(36)}"`,
    };
  } catch {
    return undefined;
  }
}

async function answerFile(request: IncomingMessage, response: ServerResponse, file: FoundFile): Promise<void> {
  const immutable = file.relative.startsWith('assets/');
  const headers: Record<string, string> = {
    ...SECURITY_HEADERS,
    'content-type': CONTENT_TYPES[extname(file.path).toLowerCase()] ?? 'application/octet-stream',
    'cache-control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
    etag: file.etag,
  };
  if (file.relative === 'index.html') headers['content-security-policy'] = CONTENT_SECURITY_POLICY;
  if (request.headers['if-none-match'] === file.etag) {
    response.writeHead(304, headers);
    response.end();
    return;
  }
  const body = request.method === 'HEAD' ? undefined : await readFile(file.path);
  response.writeHead(200, { ...headers, 'content-length': String(body?.length ?? file.size) });
  response.end(body);
}
