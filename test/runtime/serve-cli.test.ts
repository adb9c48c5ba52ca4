import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { post, runCli, spawnServe, tempDir } from '../support/helpers.js';

test('agl serve names what is wrong with its arguments', async () => {
  const badPort = await runCli(['serve', '--port', 'http']);
  assert.equal(badPort.code, 2);
  assert.match(badPort.stderr, /--port must be an integer from 0 to 65535, not "http"/);
  const badSize = await runCli(['serve', '--max-body', 'lots']);
  assert.equal(badSize.code, 2);
  assert.match(badSize.stderr, /--max-body must be a size such as 64MiB/);
  const noMemory = await runCli(['serve', '--write-memory', '0']);
  assert.equal(noMemory.code, 2);
  assert.match(noMemory.stderr, /--write-memory must be a size such as 64MiB/);
  const littleMemory = await runCli(['serve', '--write-memory', '1MiB']);
  assert.equal(littleMemory.code, 2);
  assert.match(littleMemory.stderr, /--write-memory must be at least 16MiB, not "1MiB"/);
  const littleLimit = await runCli(['serve', '--memory-limit', '32MiB']);
  assert.equal(littleLimit.code, 2);
  assert.match(littleLimit.stderr, /--memory-limit must be at least --write-memory \(64MiB\), not "32MiB"/);
  const noTime = await runCli(['serve', '--query-timeout', 'soon']);
  assert.equal(noTime.code, 2);
  assert.match(noTime.stderr, /--query-timeout must be a number of seconds above 0, not "soon"/);
  const unknown = await runCli(['serve', '--prot', '1']);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown option --prot/);
  const badOrigin = await runCli(['serve', '--allow-origin', 'http://ok.example,file:///etc']);
  assert.equal(badOrigin.code, 2);
  assert.match(
    badOrigin.stderr,
    /--allow-origin must be a web page origin such as http:\/\/localhost:3000, not "file:\/\/\/etc"/,
  );
  const badState = await runCli(['serve', '--state', 'mysql://db/agl']);
  assert.equal(badState.code, 2);
  assert.match(
    badState.stderr,
    /--state must be a PostgreSQL URL such as postgres:\/\/agl@db\.internal\/agl, not "mysql:\/\/db\/agl"/,
  );
  const command = await runCli(['srve']);
  assert.equal(command.code, 2);
  assert.match(command.stderr, /unknown command "srve"/);
  const help = await runCli(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /agl serve \[--host 127\.0\.0\.1\] \[--port 4318\]/);
  const commandHelp = await runCli(['serve', '--help']);
  assert.equal(commandHelp.code, 0);
  assert.match(commandHelp.stdout, /^agl serve \[--host/);
  assert.doesNotMatch(commandHelp.stdout, /agl query/);
});

test('agl serve applies --max-body, --decode-threads and --query-timeout', async (t) => {
  const db = join(await tempDir(t), 'flags.duckdb');
  const serve = await spawnServe(['--db', db, '--max-body', '1KiB', '--decode-threads', '0', '--query-timeout', '0.2']);
  t.after(() => serve.child.kill('SIGKILL'));
  assert.match(serve.url, /^http:\/\/127\.0\.0\.1:\d+$/, 'binds 127.0.0.1 by default');
  const tooBig = await post(`${serve.url}/v1/traces`, Buffer.alloc(2048), { 'content-type': 'application/x-protobuf' });
  assert.equal(tooBig.status, 413);
  const small = await post(`${serve.url}/v1/traces`, '{}', { 'content-type': 'application/json' });
  assert.equal(small.status, 200);
  const slow = await post(
    `${serve.url}/v1/agl/query`,
    JSON.stringify({ sql: 'SELECT count(*) FROM range(100000000000) t(x) WHERE x % 7 = 3' }),
    { 'content-type': 'application/json' },
  );
  assert.equal(slow.status, 408);
  assert.match(slow.body.toString(), /longer than 0.2 s/);
});

test('a second agl serve on the same file or port says what is in the way', async (t) => {
  const dir = await tempDir(t);
  const db = join(dir, 'owned.duckdb');
  const first = await spawnServe(['--db', db]);
  t.after(() => first.child.kill('SIGKILL'));
  const sameFile = await runCli(['serve', '--db', db, '--port', '0', '--grpc-port', '0']);
  assert.equal(sameFile.code, 1);
  assert.match(sameFile.stderr, /owned\.duckdb is in use by process \d+ \(another agl serve\?\)/);
  const port = new URL(first.url).port;
  const samePort = await runCli(['serve', '--db', join(dir, 'other.duckdb'), '--port', port, '--grpc-port', '0']);
  assert.equal(samePort.code, 1);
  assert.match(samePort.stderr, new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
});

test('a --state database that cannot be reached is named, without its password', async (t) => {
  const db = join(await tempDir(t), 'unreached.duckdb');
  const serve = await runCli(['serve', '--db', db, '--port', '0', '--state', 'postgres://agl:s3cret@127.0.0.1:1/agl']);
  assert.equal(serve.code, 1);
  assert.match(
    serve.stderr,
    /cannot use the --state database postgres:\/\/agl:\*\*\*@127\.0\.0\.1:1\/agl: the PostgreSQL state at 127\.0\.0\.1:1 is unreachable: connect ECONNREFUSED/,
  );
  assert.doesNotMatch(serve.stderr, /s3cret/);
});

test('with --token every route needs the bearer token, OTLP included', async (t) => {
  const db = join(await tempDir(t), 'token.duckdb');
  const serve = await spawnServe(['--db', db, '--token', 's3cret']);
  t.after(() => serve.child.kill('SIGKILL'));
  const span = JSON.stringify({
    resourceSpans: [
      {
        scopeSpans: [
          { spans: [{ traceId: '5b8efff798038103d269b633813fc60c', spanId: 'eee19b7ec3c1b174', name: 'guarded' }] },
        ],
      },
    ],
  });
  const anonymous = await post(`${serve.url}/v1/traces`, span, { 'content-type': 'application/json' });
  assert.equal(anonymous.status, 401);
  assert.equal(anonymous.headers.get('www-authenticate'), 'Bearer');
  const wrong = await post(`${serve.url}/v1/traces`, span, {
    'content-type': 'application/json',
    authorization: 'Bearer s3cre',
  });
  assert.equal(wrong.status, 401);
  assert.equal((await fetch(`${serve.url}/v1/agl/health`)).status, 401);
  const right = await post(`${serve.url}/v1/traces`, span, {
    'content-type': 'application/json',
    authorization: 'Bearer s3cret',
  });
  assert.equal(right.status, 200);

  const noToken = await runCli(['query', 'SELECT count(*) AS n FROM spans', '--db', db]);
  assert.equal(noToken.code, 2);
  assert.match(noToken.stderr, /\(401\): this agl server needs Authorization: Bearer <token>/);
  const withToken = await runCli([
    'query',
    'SELECT count(*) AS n FROM spans',
    '--db',
    db,
    '--token',
    's3cret',
    '--format',
    'csv',
  ]);
  assert.equal(withToken.stdout, 'n\r\n1\r\n');
});

test('agl serve logs a line per store and gateway request, none with --quiet', async (t) => {
  const dir = await tempDir(t);
  const loud = await spawnServe(['--db', join(dir, 'loud.duckdb')]);
  const quiet = await spawnServe(['--db', join(dir, 'quiet.duckdb'), '--quiet']);
  t.after(async () => {
    for (const serve of [loud, quiet]) {
      serve.child.kill('SIGTERM');
      await serve.exited;
    }
  });
  for (const serve of [loud, quiet]) await fetch(`${serve.url}/v1/agl/statistics`);
  await fetch(`${loud.url}/v1/agl/no-such-route`);
  // The lines reach this process through a pipe, a moment after the answers.
  for (let i = 0; i < 100 && !/no-such-route/.test(loud.output()); i++)
    await new Promise((resolve) => setTimeout(resolve, 20));
  assert.match(loud.output(), /agl: GET \/v1\/agl\/statistics 200 \d+\.\d ms/);
  assert.match(loud.output(), /agl: GET \/v1\/agl\/no-such-route 404/);
  assert.doesNotMatch(quiet.output(), /GET \/v1\/agl/);
});

test('a port in use fails before the database file is created', async (t) => {
  const dir = await tempDir(t);
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  const port = String((taken.address() as AddressInfo).port);
  const failed = await runCli(['serve', '--db', join(dir, 'never.duckdb'), '--port', port, '--grpc-port', '0']);
  assert.equal(failed.code, 1);
  assert.match(failed.stderr, new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
  assert.deepEqual(await readdir(dir), []);
});

test('listening beyond loopback without --token warns of what anyone could do', async (t) => {
  const dir = await tempDir(t);
  const stopped = async (args: string[]) => {
    const serve = await spawnServe(args);
    serve.child.kill('SIGTERM');
    await serve.exited;
    return serve.output();
  };
  const open = await stopped(['--db', join(dir, 'open.duckdb'), '--host', '0.0.0.0']);
  assert.match(
    open,
    /warning: listening on 0\.0\.0\.0 without --token: anyone who can reach this address can read all stored data, enqueue work and redirect agents' LLM calls; set --token/,
  );
  const guarded = await stopped(['--db', join(dir, 'guarded.duckdb'), '--host', '0.0.0.0', '--token', 's3cret']);
  assert.doesNotMatch(guarded, /warning/);
  const local = await stopped(['--db', join(dir, 'local.duckdb')]);
  assert.doesNotMatch(local, /warning/);
});
