import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, type RunningServer, type ServerOptions } from '../../src/collector/server.js';
import { DuckDBStore, type StoreOptions } from '../../src/store/store.js';
import { jsonValue } from '../../src/adapters/json-column.js';

/** The repository's root: tests run from dist/test, this file from dist/test/support. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
/** The compiled CLI. */
export const CLI = join(ROOT, 'dist', 'src', 'runtime', 'cli.js');
/** Test data, read from the source tree so that it is not copied into dist. */
export const FIXTURES = join(ROOT, 'test', 'fixtures');

/**
 * The search path a read of llm_calls plans with: the store checks what to plan with only for
 * SQL that names the views it decides (src/store/query.ts, withCheckedNames).
 */
export const LLM_CALLS_SEARCH_PATH =
  "SELECT current_setting('search_path') AS path FROM (SELECT count(*) FROM llm_calls)";

/** A fresh temp folder; remove it with `removeDir` (in the file's `after` hook). */
export const newTempDir = () => mkdtemp(join(tmpdir(), 'agl-test-'));
export const removeDir = (dir: string) => rm(dir, { recursive: true, force: true });

/** A temp folder removed when test `t` ends. */
export async function tempDir(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const dir = await newTempDir();
  t.after(() => removeDir(dir));
  return dir;
}

export interface InProcessAgl {
  readonly url: string;
  readonly store: DuckDBStore;
  readonly server: RunningServer;
  close(): Promise<void>;
}

/** A store and server in this process on a free port of 127.0.0.1. */
export async function startAgl(
  dbPath: string,
  options: Omit<StoreOptions, 'path'> & ServerOptions = {},
): Promise<InProcessAgl> {
  const store = await DuckDBStore.open({ ...options, path: dbPath });
  const server = await startServer(store, { port: 0, ...options });
  return {
    url: server.url,
    store,
    server,
    close: async () => {
      await server.close();
      await store.close();
    },
  };
}

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export function runCli(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: options.cwd, env: options.env, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

// A safety net: servers still running when the test process exits are killed. Tests stop the
// servers they start in an `after` hook, which runs whether or not their assertions passed.
const children = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

/** A port that was free a moment ago (for `--grpc-port`, whose 0 means off). */
export async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export interface SpawnedServe {
  readonly url: string;
  /** host:port of OTLP/gRPC, when args gave it a --grpc-port (without one, a spawned server has none). */
  readonly grpcAddress: string | undefined;
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
  readonly output: () => string;
}

/** `agl serve` as a child process (`env` added to this process's); resolves once it printed its address. */
export async function spawnServe(args: string[], env: NodeJS.ProcessEnv = {}): Promise<SpawnedServe> {
  // Any free HTTP port and no OTLP/gRPC unless `args` say otherwise (the last of a flag wins).
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--grpc-port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  children.add(child);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );

  let output = '';
  const [url, grpcAddress] = await new Promise<[string, string | undefined]>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /serving on (http:\/\/\S+?)(?:, OTLP\/gRPC on (\S+))?, storing/.exec(output);
      if (match) resolve([match[1], match[2]]);
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    void exited.then(() => reject(new Error(`agl serve exited before serving:\n${output}`)));
  });
  return { url, grpcAddress, child, exited, output: () => output };
}

/**
 * Kills a spawned server (SIGKILL), starts it again on its file (stopped after the test) and
 * answers it with its span count and highest sequence id, read through it with `agl query`.
 */
export async function restartAfterKill(
  t: { after(fn: () => Promise<void>): void },
  killed: SpawnedServe,
  db: string,
): Promise<{ again: SpawnedServe; stored: { n: number; last: number } }> {
  killed.child.kill('SIGKILL');
  await killed.exited;
  const again = await spawnServe(['--db', db]);
  t.after(async () => {
    again.child.kill('SIGTERM');
    await again.exited;
  });
  const sql = 'SELECT count(*) AS n, max(sequence_id) AS last FROM spans';
  const count = await runCli(['query', sql, '--url', again.url, '--format', 'json']);
  assert.equal(count.code, 0, count.stderr);
  return { again, stored: JSON.parse(count.stdout)[0] };
}

export async function post(
  url: string,
  body: Buffer | string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Headers; body: Buffer }> {
  const response = await fetch(url, { method: 'POST', body, headers });
  return { status: response.status, headers: response.headers, body: Buffer.from(await response.arrayBuffer()) };
}

/** How many spans the store holds: what a fault test checks is still all there. */
export const spanCount = async (store: DuckDBStore): Promise<number> =>
  (await store.query('SELECT count(*) AS n FROM spans')).rows[0].n as number;

/** Rows of a query on a test's store, any SQL allowed. */
export const queryRows = async (store: DuckDBStore, sql: string): Promise<Record<string, unknown>[]> =>
  (await store.query(sql, { guard: false })).rows;

/** The rows of `sql` on a DuckDB file no one holds open any more (a finished fit's, a CLI run's), opened read-only. */
export async function fileRows(path: string, sql: string): ReturnType<typeof queryRows> {
  const store = await DuckDBStore.open({ path, readOnly: true });
  try {
    return await queryRows(store, sql);
  } finally {
    await store.close();
  }
}

/** The rows of `sql` once there are `count` of them (spans some servers store a moment after answering), or what is there after 2 s. */
export async function eventually(store: DuckDBStore, sql: string, count: number): Promise<Record<string, unknown>[]> {
  for (let i = 0; ; i++) {
    const found = await queryRows(store, sql);
    if (found.length >= count || i === 100) return found;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export { jsonValue as json };

/** A chat message as the llm_calls columns hold it (the fields tests read). */
export interface StoredMessage {
  role: string;
  content: unknown;
  name?: string;
  tool_call_id?: string;
  tool_calls?: { id: string; type: string; function: { name: string; arguments: string } }[];
}

/** A messages column (input_messages, output_messages), parsed. */
export const messagesIn = (column: unknown) => jsonValue(column) as StoredMessage[];
/** The tools column, parsed. */
export const toolsIn = (column: unknown) => jsonValue(column) as { type: string; function: { name: string } }[];
/** A JSON object column (attributes), parsed. */
export const objectIn = (column: unknown) => jsonValue(column) as Record<string, unknown>;

/** Runs `check` every 100 ms until it passes; its last failure after `timeoutMs`. */
export async function until(check: () => Promise<void>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
