import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { newTempDir, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';

// The dashboard's files, served by agl serve at every path outside /v1/: the right types and
// caching, the page for the dashboard's own routes, nothing outside its folder, and no change
// to what the API asks of a request (token, browser guard).

const TOKEN = 'dashboard-files-token';
const INDEX = '<!doctype html><title>agl</title><script type="module" src="/assets/index-abc123.js"></script>';

let dir: string;
let agl: InProcessAgl;
let bare: InProcessAgl;
before(async () => {
  dir = await newTempDir();
  const built = join(dir, 'dashboard');
  await mkdir(join(built, 'assets'), { recursive: true });
  await writeFile(join(built, 'index.html'), INDEX);
  await writeFile(join(built, 'assets', 'index-abc123.js'), 'console.log("agl");');
  await writeFile(join(built, 'assets', 'index-abc123.css'), 'body{}');
  await writeFile(join(built, 'favicon.svg'), '<svg xmlns="http://www.w3.org/2000/svg"/>');
  // A file beside the dashboard's folder that no path may reach.
  await writeFile(join(dir, 'secret.txt'), 'not for the web');
  agl = await startAgl(join(dir, 'files.duckdb'), { dashboardDir: built, token: TOKEN });
  bare = await startAgl(join(dir, 'bare.duckdb'), { dashboardDir: join(dir, 'not-built') });
});
after(async () => {
  await agl.close();
  await bare.close();
  await removeDir(dir);
});

interface Answer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A raw request: the path goes out exactly as written (fetch would resolve `..` first). */
function send(url: string, path: string, method = 'GET', headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}/`, { method, path, headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.once('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: text }));
    });
    request.once('error', reject);
    request.end();
  });
}

test('the page and its files need no token, with their types and caching; the API still does', async () => {
  const page = await send(agl.url, '/');
  assert.equal(page.status, 200);
  assert.equal(page.body, INDEX);
  assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
  assert.equal(page.headers['cache-control'], 'no-cache');
  assert.match(String(page.headers['content-security-policy']), /default-src 'self'.*frame-ancestors 'none'/);
  assert.equal(page.headers['x-content-type-options'], 'nosniff');

  const script = await send(agl.url, '/assets/index-abc123.js');
  assert.equal(script.status, 200);
  assert.equal(script.headers['content-type'], 'text/javascript; charset=utf-8');
  assert.equal(script.headers['cache-control'], 'public, max-age=31536000, immutable');
  assert.equal((await send(agl.url, '/assets/index-abc123.css')).headers['content-type'], 'text/css; charset=utf-8');
  assert.equal((await send(agl.url, '/favicon.svg')).headers['content-type'], 'image/svg+xml');

  const revalidated = await send(agl.url, '/', 'GET', { 'if-none-match': String(page.headers.etag) });
  assert.equal(revalidated.status, 304);
  const head = await send(agl.url, '/assets/index-abc123.js', 'HEAD');
  assert.equal(head.status, 200);
  assert.equal(head.headers['content-length'], String('console.log("agl");'.length));

  assert.equal((await send(agl.url, '/v1/agl/health')).status, 401);
  const withToken = await send(agl.url, '/v1/agl/health', 'GET', { authorization: `Bearer ${TOKEN}` });
  assert.equal(withToken.status, 200);
});

test("the dashboard's own routes get the page; a missing file with an extension is a 404, not the page", async () => {
  for (const path of ['/rollouts/ro-1', '/rollouts/ro-1?attempt=at-1', '/training', '/sql/']) {
    const answer = await send(agl.url, path);
    assert.equal(answer.status, 200, path);
    assert.equal(answer.body, INDEX, path);
  }
  const missing = await send(agl.url, '/assets/index-gone.js');
  assert.equal(missing.status, 404);
  assert.match(JSON.parse(missing.body).detail, /no file \/assets\/index-gone\.js/);
  // Paths under /v1/ stay the API's: an unknown one is the API's 404, never the page.
  const api = await send(agl.url, '/v1/nothing', 'GET', { authorization: `Bearer ${TOKEN}` });
  assert.equal(api.status, 404);
  assert.match(JSON.parse(api.body).detail, /no route \/v1\/nothing/);
  const post = await send(agl.url, '/', 'POST');
  assert.equal(post.status, 405);
  assert.equal(post.headers.allow, 'GET, HEAD');
});

test('no path reaches a file outside the folder', async () => {
  for (const path of [
    '/../secret.txt',
    '/assets/../../secret.txt',
    '/%2e%2e/secret.txt',
    '/assets/%2e%2e%2f%2e%2e%2fsecret.txt',
    '/..%5csecret.txt',
    '/%00',
    '/assets/%E0%A4',
  ]) {
    const answer = await send(agl.url, path);
    assert.ok(answer.status === 400 || answer.status === 404, `${path}: ${answer.status}`);
    assert.doesNotMatch(answer.body, /not for the web/, path);
  }
});

test('the browser guard still applies to the page: a cross-site request or a foreign Host is refused', async () => {
  const crossSite = await send(agl.url, '/', 'GET', { 'sec-fetch-site': 'cross-site' });
  assert.equal(crossSite.status, 403);
  const rebound = await send(agl.url, '/', 'GET', { host: 'evil.example:4318' });
  assert.equal(rebound.status, 421);
  const sameOrigin = await send(agl.url, '/', 'GET', { 'sec-fetch-site': 'same-origin' });
  assert.equal(sameOrigin.status, 200);
});

test('a server whose dashboard is not built says how to build it', async () => {
  const answer = await send(bare.url, '/');
  assert.equal(answer.status, 404);
  assert.match(JSON.parse(answer.body).detail, /the dashboard is not built: run npm run build/);
});
