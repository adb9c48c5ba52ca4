import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, open, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { DuckDBStore } from '../../src/store/store.js';
import { newTempDir, post, removeDir, startAgl, until, type InProcessAgl } from '../support/helpers.js';
import { freshCopy, makeBatch, type BatchTemplate } from '../support/otlp-batches.js';

// A full disk: OTLP answers 503 + Retry-After (exporters retry it; a 500 they drop), health says
// degraded and why, and once there is room again ingest resumes by itself with every span that
// was acknowledged in the file. The database lives on a small tmpfs of its own: mounting it needs
// root or password-less sudo, as scripts/system-packages.sh does; without either the tests fail
// saying so (a skip would let `npm test` pass without them).

const PROTOBUF = { 'content-type': 'application/x-protobuf' };

let dir: string;
let disk: string | undefined;
let mountRefused: string | undefined;
/** `mount` and `umount` as root: directly, or through sudo that asks no password. */
const asRoot = (command: string, args: string[]) =>
  process.getuid?.() === 0
    ? execFileSync(command, args, { stdio: 'pipe' })
    : execFileSync('sudo', ['-n', command, ...args], { stdio: 'pipe' });
before(async () => {
  dir = await newTempDir();
  const mountPoint = join(dir, 'disk');
  await mkdir(mountPoint);
  try {
    asRoot('mount', ['-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', mountPoint]);
    disk = mountPoint;
  } catch (error) {
    mountRefused = String((error as { stderr?: Buffer }).stderr ?? error).trim();
  }
});
after(async () => {
  if (disk) asRoot('umount', ['-l', disk]);
  await removeDir(dir);
});

/** The disk of the test's database; the test fails when this user may not mount one. */
function testDisk(): string {
  if (!disk)
    assert.fail(
      `needs a tmpfs of its own: run the tests as root or with password-less sudo to mount one (mount said: ${mountRefused})`,
    );
  return disk;
}

/** Fills the disk with a file until writing fails; returns the file's path. */
async function fill(where: string): Promise<string> {
  const path = join(where, 'filler');
  const file = await open(path, 'w');
  try {
    for (const size of [2 ** 20, 4096]) {
      const chunk = Buffer.alloc(size, 1);
      for (;;) {
        try {
          await file.write(chunk);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
          break;
        }
      }
    }
  } finally {
    await file.close();
  }
  return path;
}

async function health(agl: InProcessAgl): Promise<unknown> {
  const response = await fetch(`${agl.url}/v1/agl/health`);
  assert.equal(response.status, 200);
  return response.json();
}

/** Posts batches until one gets a 503 (the disk is full); counts the spans acknowledged before it. */
async function postUntilRefused(
  agl: InProcessAgl,
  template: BatchTemplate,
  serial: { next: number },
  acked: { spans: number },
): Promise<Buffer> {
  for (let i = 0; i < 50; i++) {
    const body = freshCopy(template, serial.next++);
    const answer = await post(`${agl.url}/v1/traces`, body, PROTOBUF);
    if (answer.status === 200) {
      acked.spans += template.spanCount;
      continue;
    }
    assert.equal(answer.status, 503, answer.body.toString());
    assert.ok(Number(answer.headers.get('retry-after')) > 0, 'Retry-After');
    assert.equal(answer.headers.get('content-type'), 'application/x-protobuf');
    assert.equal(answer.body[0], 0x08);
    assert.equal(answer.body[1], 14, 'google.rpc.Code UNAVAILABLE');
    return body;
  }
  assert.fail('the full disk never refused a write');
}

/** The spans the file holds, opened anew once the server closed. */
async function spansInFile(path: string): Promise<number> {
  const store = await DuckDBStore.open({ path, readOnly: true });
  try {
    return Number((await store.query('SELECT count(*) AS n FROM spans')).rows[0].n);
  } finally {
    await store.close();
  }
}

async function emptyDisk(where: string): Promise<void> {
  for (const name of await readdir(where)) await rm(join(where, name), { recursive: true, force: true });
}

test('disk full at commit: 503 + Retry-After, health degraded; with room again ingest resumes and nothing acknowledged is lost', async (t) => {
  const where = testDisk();
  await emptyDisk(where);
  const path = join(where, 'full.duckdb');
  const agl = await startAgl(path, { deriveWhenIdleMs: Infinity });
  let closed = false;
  t.after(() => closed || agl.close());
  const template = await makeBatch(40, { promptBytes: 2000 });
  const serial = { next: 1 };
  const acked = { spans: 0 };
  assert.equal((await post(`${agl.url}/v1/traces`, freshCopy(template, serial.next++), PROTOBUF)).status, 200);
  acked.spans += template.spanCount;

  const filler = await fill(where);
  const refused = await postUntilRefused(agl, template, serial, acked);
  const degraded = (await health(agl)) as { status: string; reason: string };
  assert.equal(degraded.status, 'degraded');
  assert.match(degraded.reason, /No space left on device/);
  // Larger than what is left of the WAL's last page (a few bytes may still fit there).
  const input = { task: 'x'.repeat(100_000) };
  const enqueue = await post(`${agl.url}/v1/agl/queues/rollouts/enqueue`, JSON.stringify({ rollouts: [{ input }] }), {
    'content-type': 'application/json',
  });
  assert.equal(enqueue.status, 503, 'a REST write too');
  assert.ok(Number(enqueue.headers.get('retry-after')) > 0);
  assert.match(JSON.parse(enqueue.body.toString()).detail, /cannot write now/);

  await rm(filler);
  // What an exporter does with the 503: sends the same request again.
  const retried = await post(`${agl.url}/v1/traces`, refused, PROTOBUF);
  assert.equal(retried.status, 200);
  acked.spans += template.spanCount;
  assert.deepEqual(await health(agl), { status: 'ok', backend: 'duckdb' });
  assert.equal((await post(`${agl.url}/v1/traces`, freshCopy(template, serial.next++), PROTOBUF)).status, 200);
  acked.spans += template.spanCount;

  await agl.close();
  closed = true;
  assert.equal(await spansInFile(path), acked.spans);
});

test('disk full at a checkpoint (DuckDB invalidates the database): 503s, then the store opens it again by itself', async (t) => {
  const where = testDisk();
  await emptyDisk(where);
  const path = join(where, 'fatal.duckdb');
  // The idle checkpoint runs once the WAL holds 16 MB and no span came for a second.
  const agl = await startAgl(path, { deriveWhenIdleMs: 1000 });
  let closed = false;
  t.after(() => closed || agl.close());
  const template = await makeBatch(40, { promptBytes: 25_000 });
  const serial = { next: 1 };
  const acked = { spans: 0 };
  for (let i = 0; i < 18; i++) {
    assert.equal((await post(`${agl.url}/v1/traces`, freshCopy(template, serial.next++), PROTOBUF)).status, 200);
    acked.spans += template.spanCount;
  }
  const filler = await fill(where);
  await until(async () => assert.equal(((await health(agl)) as { status: string }).status, 'degraded'), 20_000);
  const refused = await postUntilRefused(agl, template, serial, acked);
  // A state change that fails now has its state loaded again from the database, which must
  // itself be opened again first: neither may leave the store refusing every later write.
  const enqueue = () =>
    post(`${agl.url}/v1/agl/queues/rollouts/enqueue`, JSON.stringify({ rollouts: [{ input: 'x'.repeat(100_000) }] }), {
      'content-type': 'application/json',
    });
  assert.equal((await enqueue()).status, 503);

  await rm(filler);
  const retried = await post(`${agl.url}/v1/traces`, refused, PROTOBUF);
  assert.equal(retried.status, 200, retried.body.toString());
  acked.spans += template.spanCount;
  assert.equal((await enqueue()).status, 201);
  assert.deepEqual(await health(agl), { status: 'ok', backend: 'duckdb' });
  assert.equal(
    Number((await agl.store.query('SELECT count(*) AS n FROM spans')).rows[0].n),
    acked.spans,
    'reads see every span',
  );

  await agl.close();
  closed = true;
  assert.equal(await spansInFile(path), acked.spans);
});
