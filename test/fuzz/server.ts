import { existsSync } from 'node:fs';
import { mkdtemp, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { exportDataset } from '../../src/runtime/export-command.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';
import type { CallIds } from './call-cases.js';
import { newTempDir, queryRows, removeDir, startAgl, type InProcessAgl, until } from '../support/helpers.js';

/**
 * The databases live in memory-backed /dev/shm where there is one: what the fuzz judges is what
 * the store answers and keeps readable, not durability, and a commit's fsync on disk was about a
 * third of an OTLP case's time (37 against 52 cases/s).
 */
const MEMORY_DIR = '/dev/shm';
const fuzzDir = () => (existsSync(MEMORY_DIR) ? mkdtemp(join(MEMORY_DIR, 'agl-fuzz-')) : newTempDir());

export interface FuzzRequest {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: Buffer;
}

export interface FuzzAnswer {
  readonly status: number;
  readonly text: string;
}

/** What a case broke; the message names the request or read that failed. */
export class InvariantBroken extends Error {
  override name = 'InvariantBroken';
}

/**
 * Longer than any answer of a healthy server: waits are capped well below it, and a query is
 * answered (408) at the server's 30 s limit. The checks' whole-database reads took over 20 s on
 * two cores shared with other runs.
 */
const REQUEST_TIMEOUT_MS = 45_000;
const EXPORTS = ['triplets', 'messages', 'trajectories'] as const;
/** The in-memory state of the rollout API, read the way clients read it. */
const STATE_READS = [
  '/v1/agl/rollouts',
  '/v1/agl/workers',
  '/v1/agl/resources',
  '/v1/agl/resources/latest',
  '/v1/agl/statistics',
];

/** One agl server in this process over a DuckDB file in a temp folder, and the reads every case must leave working. */
export class FuzzServer {
  private constructor(
    private readonly dir: string,
    /** The model behind the gateway's Anthropic route. */
    private readonly claude: AnthropicTestServer,
    private agl: InProcessAgl,
    private restarts: number,
  ) {}

  static async start(): Promise<FuzzServer> {
    const dir = await fuzzDir();
    const claude = await startAnthropicTestServer();
    return new FuzzServer(dir, claude, await FuzzServer.open(dir, claude, 0), 0);
  }

  private static open(dir: string, claude: AnthropicTestServer, serial: number): Promise<InProcessAgl> {
    // (storeStamp knows the file by this name.)
    // The product's query limit: the checks read the whole database through the query route,
    // which after thousands of cases took over 5 s on two loaded cores (a 408 counted as broken).
    // The deriver runs when the checks say (deriveAll), not on an idle timer: the same
    // cases meet the same database on every run.
    return startAgl(join(dir, `fuzz-${serial}.duckdb`), {
      queryTimeoutMs: 30_000,
      deriveWhenIdleMs: Infinity,
      gateway: { anthropicUpstream: claude.url, timeoutMs: 5_000, returnTokenIds: false },
    });
  }

  get url(): string {
    return this.agl.url;
  }

  /** A fresh server and database, after a case broke the old one (so that later cases are judged on their own). */
  async restart(): Promise<void> {
    await this.agl.close().catch(() => {}); // a broken server may fail to close; the new one is what matters
    this.agl = await FuzzServer.open(this.dir, this.claude, ++this.restarts);
  }

  async close(): Promise<void> {
    await this.agl.close();
    await this.claude.close();
    await removeDir(this.dir);
  }

  /** Sends one request; no answer within the limit, or a cut connection, breaks the invariant. */
  async send(request: FuzzRequest): Promise<FuzzAnswer> {
    let response: Response;
    try {
      response = await fetch(new URL(request.path, this.agl.url), {
        method: request.method,
        headers: request.headers,
        body: request.body,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      return { status: response.status, text: await response.text() };
    } catch (error) {
      const cause = (error as Error).cause as Error | undefined;
      throw new InvariantBroken(
        `no answer to ${request.method} ${request.path}: ${(error as Error).message}${cause ? ` (${cause.message})` : ''}`,
      );
    }
  }

  /** The model server's record of what it was sent, dropped: a long run sends tens of thousands. */
  forgetModelRequests(): void {
    this.claude.requests.length = 0;
  }

  /**
   * `count` Anthropic calls through the gateway, each answered and stored: what feedback cases
   * name when the feedback target runs without the Anthropic target before it.
   */
  async recordCalls(count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const body = { model: 'claude-fuzz', max_tokens: 16, messages: [{ role: 'user', content: `call ${i}` }] };
      const answer = await this.send({
        method: 'POST',
        path: '/v1/gateway/v1/messages',
        headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: Buffer.from(JSON.stringify(body)),
      });
      if (answer.status !== 200)
        throw new Error(`a call to name in feedback answered ${answer.status}: ${answer.text}`);
    }
    this.forgetModelRequests();
    // The gateway stores its spans in batches after it answered (within 100 ms): until they are,
    // cases would name no call, and their landing would pass for a refused case's write.
    await until(async () => {
      const [{ n }] = await this.storeRows('SELECT count(*)::INTEGER AS n FROM spans');
      if (Number(n) < count) throw new Error(`the gateway stored ${n} of the ${count} calls recorded`);
    }, 10_000);
  }

  /**
   * The latest spans and the response ids they record (64 at most): what feedback cases name.
   * Read from `spans`, not `llm_calls`: with the deriver held back, each read of the view
   * derived every span stored so far.
   */
  async callIds(): Promise<CallIds> {
    const rows = await this.storeRows(
      `SELECT trace_id, span_id, rollout_id, attempt_id, attributes->>'gen_ai.response.id' AS response_id
       FROM spans WHERE json_valid(attributes) ORDER BY commit_seq DESC LIMIT 64`,
    );
    return {
      spans: rows as unknown as CallIds['spans'],
      responseIds: rows.flatMap((row) => (typeof row.response_id === 'string' ? [row.response_id] : [])),
    };
  }

  /** Rows of `sql` straight from the store (no guard): the harness's own view of the database. */
  storeRows(sql: string): Promise<Record<string, unknown>[]> {
    return queryRows(this.agl.store, sql);
  }

  /**
   * Every table and view read whole through the query route (as JSON and as Parquet), the
   * rollout API's reads, the three exports of `agl export` over the whole database, and the
   * deriver; then the views that read derived rows, again.
   */
  async checkReads(): Promise<void> {
    const started = Date.now();
    try {
      await this.readEverything();
    } finally {
      this.lastCheckMs = Date.now() - started;
    }
  }

  /** How long the last checkReads took: the database it read grows as a run goes on. */
  lastCheckMs = 0;

  private async readEverything(): Promise<void> {
    const relations = await this.storeRows(
      `SELECT table_name AS name FROM duckdb_tables() WHERE NOT internal AND schema_name = 'main'
       UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY name`,
    );
    await allInOrder([
      ...relations.flatMap(({ name }) =>
        ['json', 'parquet'].map((format) => () => this.readWhole(String(name), format)),
      ),
      ...STATE_READS.map((path) => async () => {
        const answer = await this.send({ method: 'GET', path, headers: {} });
        if (answer.status !== 200)
          throw new InvariantBroken(`GET ${path} answered ${answer.status}: ${answer.text.slice(0, 500)}`);
      }),
    ]);
    await this.exportAll();
    await this.derive();
    await allInOrder(['llm_calls', 'rewards'].map((name) => () => this.readWhole(name, 'json')));
  }

  /** The deriver's rounds over every span stored so far (what it does by itself when the store is idle). */
  async derive(): Promise<void> {
    try {
      await this.agl.store.deriveAll();
    } catch (error) {
      throw new InvariantBroken(`the deriver failed: ${(error as Error).message.slice(0, 500)}`);
    }
  }

  private async readWhole(relation: string, format: string): Promise<void> {
    const sql = `SELECT * FROM "${relation}"`;
    const answer = await this.send({
      method: 'POST',
      path: '/v1/agl/query',
      headers: { 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ sql, format })),
    });
    if (answer.status !== 200)
      throw new InvariantBroken(
        `reading ${relation} as ${format} answered ${answer.status}: ${answer.text.slice(0, 500)}`,
      );
  }

  /** `agl export KIND --url` for the three kinds, run in this process; their summary lines are kept for the failure message. */
  private async exportAll(): Promise<void> {
    const printed: string[] = [];
    const print = console.error;
    console.error = (...args: unknown[]) => printed.push(args.join(' '));
    try {
      await allInOrder(
        EXPORTS.map((kind) => async () => {
          try {
            await exportDataset([kind, '--url', this.agl.url, '--out', join(this.dir, `${kind}.jsonl`)]);
          } catch (error) {
            throw new InvariantBroken(`agl export ${kind} failed: ${(error as Error).message.slice(0, 500)}`);
          }
        }),
      );
    } catch (error) {
      throw new InvariantBroken(`${(error as Error).message}${printed.length ? `\n${printed.join('\n')}` : ''}`);
    } finally {
      console.error = print;
    }
  }

  /** The store's statistics without the uptime: what a rejected write must leave as it was. */
  async stateCounts(): Promise<string> {
    const answer = await this.send({ method: 'GET', path: '/v1/agl/statistics', headers: {} });
    if (answer.status !== 200)
      throw new InvariantBroken(`GET /v1/agl/statistics answered ${answer.status}: ${answer.text.slice(0, 500)}`);
    const { uptime: _uptime, ...counts } = JSON.parse(answer.text) as Record<string, unknown>;
    return JSON.stringify(counts);
  }

  /**
   * What the database files are now: size and modification time of the file and its WAL. Any
   * committed write changes them (it lands in the WAL first), and a stat costs microseconds
   * where hashing every table cost more than the SQL case it judged (20 against 50 cases/s).
   */
  async storeStamp(): Promise<string> {
    const file = join(this.dir, `fuzz-${this.restarts}.duckdb`);
    const stamps = await Promise.all(
      [file, `${file}.wal`].map((path) =>
        stat(path, { bigint: true }).then(
          (s) => `${s.size}@${s.mtimeNs}`,
          () => 'none',
        ),
      ),
    );
    return stamps.join(' ');
  }
}

/** Runs the reads at once (they are independent), then throws the first failure in list order, so that a report does not depend on timing. */
async function allInOrder(reads: (() => Promise<void>)[]): Promise<void> {
  const results = await Promise.allSettled(reads.map((read) => read()));
  const failed = results.find((result) => result.status === 'rejected');
  if (failed) throw failed.reason;
}
