import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { notInstalled } from './system-packages.js';

// A throwaway PostgreSQL cluster for tests and benchmarks: initdb into a temp folder, the
// server on a free port of 127.0.0.1 (no Unix socket), stopped at the end. PostgreSQL refuses to
// run as root, so as root its programs run as the `postgres` user (Debian's package makes it).

/** The newest installed PostgreSQL's programs (Debian: /usr/lib/postgresql/<major>/bin), or null. */
function postgresBin(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const majors = readdirSync(root)
    .filter((name) => existsSync(join(root, name, 'bin', 'postgres')))
    .sort((a, b) => Number(b) - Number(a));
  return majors.length === 0 ? null : join(root, majors[0], 'bin');
}

const BIN = postgresBin();

/** The uid and gid of `postgres` when this process runs as root (PostgreSQL will not), else null. */
function runAs(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  if (!line) throw new Error('running as root, and there is no postgres user to run PostgreSQL as');
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

// A safety net: clusters still running when the process exits are stopped at once.
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGQUIT');
});

function run(program: string, args: string[], user: { uid: number; gid: number } | null): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(BIN as string, program), args, { ...(user ?? {}), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(output) : reject(new Error(`${program} failed:\n${output}`))));
  });
}

export interface PostgresCluster {
  /** The postmaster's process id (its children are the cluster's backends); another after `restart`. */
  readonly pid: number;
  /** host:port of the server, as agl's messages name it. */
  readonly address: string;
  /** A new empty database; answers its URL. */
  createDatabase(): Promise<string>;
  /**
   * Takes the server down as an operator does (`pg_ctl stop -m fast`: every connection is
   * ended), its data kept; `start` brings the same cluster back on the same port.
   */
  shutDown(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server (fast shutdown) and removes its folder. */
  stop(): Promise<void>;
}

/**
 * Starts a cluster; the caller stops it (an `after` hook). Tests run it without fsync (what
 * they check does not need a durable disk); `durable` keeps PostgreSQL's defaults (benchmarks).
 */
export async function startPostgres({ durable = false } = {}): Promise<PostgresCluster> {
  if (BIN === null) throw notInstalled('PostgreSQL (/usr/lib/postgresql/<major>/bin/postgres)', 'postgresql');
  const user = runAs();
  const dir = await mkdtemp(join(tmpdir(), 'agl-pg-'));
  if (user) await chown(dir, user.uid, user.gid);
  const data = join(dir, 'data');
  await run('initdb', ['-D', data, '-A', 'trust', '-U', 'agl', '-E', 'UTF8', '--no-sync'], user);
  for (let tries = 1; ; tries++) {
    const port = await freePort();
    try {
      const server = await startServer(data, port, user, durable);
      return cluster(server, port, dir, () => startServer(data, port, user, durable), user);
    } catch (error) {
      if (tries === 3) throw error;
    }
  }
}

function startServer(
  data: string,
  port: number,
  user: { uid: number; gid: number } | null,
  durable: boolean,
): Promise<ChildProcess> {
  const settings = {
    listen_addresses: '127.0.0.1',
    unix_socket_directories: '',
    max_connections: '300',
    ...(durable ? {} : { fsync: 'off', full_page_writes: 'off' }),
  };
  const args = ['-D', data, '-p', String(port), ...Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`])];
  const child = spawn(join(BIN as string, 'postgres'), args, { ...(user ?? {}), stdio: ['ignore', 'ignore', 'pipe'] });
  running.add(child);
  child.once('exit', () => running.delete(child));
  return new Promise((resolve, reject) => {
    let log = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      log += chunk;
      if (log.includes('database system is ready to accept connections')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`postgres exited (${code}) before it was ready:\n${log}`)));
  });
}

function cluster(
  first: ChildProcess,
  port: number,
  dir: string,
  startAgain: () => Promise<ChildProcess>,
  user: { uid: number; gid: number } | null,
): PostgresCluster {
  let server = first;
  const url = (database: string) => `postgres://agl@127.0.0.1:${port}/${database}`;
  return {
    get pid() {
      return server.pid as number;
    },
    address: `127.0.0.1:${port}`,
    async createDatabase() {
      const name = `t_${randomBytes(6).toString('hex')}`;
      const client = new pg.Client(url('postgres'));
      await client.connect();
      try {
        await client.query(`CREATE DATABASE ${name}`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    async shutDown() {
      const exited = new Promise((resolve) => server.once('exit', resolve));
      await run('pg_ctl', ['stop', '-D', join(dir, 'data'), '-m', 'fast', '-w'], user);
      await exited;
    },
    async start() {
      // The postmaster again as a child of this process (not pg_ctl start's daemon), so that the
      // exit hook above stops it if the test dies.
      server = await startAgain();
    },
    async stop() {
      if (server.exitCode === null) {
        const exited = new Promise((resolve) => server.once('exit', resolve));
        server.kill('SIGINT');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
