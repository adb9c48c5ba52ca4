import { join } from 'node:path';
import { exportDataset } from '../../src/runtime/export-command.js';
import { newTempDir, queryRows, removeDir, startAgl, type InProcessAgl } from '../support/helpers.js';

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
    private agl: InProcessAgl,
    private restarts: number,
  ) {}

  static async start(): Promise<FuzzServer> {
    const dir = await newTempDir();
    return new FuzzServer(dir, await FuzzServer.open(dir, 0), 0);
  }

  private static open(dir: string, serial: number): Promise<InProcessAgl> {
    // The product's query limit: the checks read the whole database through the query route,
    // which after thousands of cases took over 5 s on two loaded cores (a 408 counted as broken).
    // The deriver runs when the checks say (deriveAll), not on an idle timer: the same
    // cases meet the same database on every run.
    return startAgl(join(dir, `fuzz-${serial}.duckdb`), { queryTimeoutMs: 30_000, deriveWhenIdleMs: Infinity });
  }

  get url(): string {
    return this.agl.url;
  }

  /** A fresh server and database, after a case broke the old one (so that later cases are judged on their own). */
  async restart(): Promise<void> {
    await this.agl.close().catch(() => {}); // a broken server may fail to close; the new one is what matters
    this.agl = await FuzzServer.open(this.dir, ++this.restarts);
  }

  async close(): Promise<void> {
    await this.agl.close();
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

  /** A digest of everything stored: the databases, the relations, and every table's row count and content hash. */
  async fingerprint(): Promise<string> {
    const tables = await this.storeRows(
      `SELECT table_name AS name FROM duckdb_tables() WHERE NOT internal ORDER BY ALL`,
    );
    const parts = [
      JSON.stringify(await this.storeRows(`SELECT database_name FROM duckdb_databases() ORDER BY ALL`)),
      JSON.stringify(
        await this.storeRows(`SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal ORDER BY ALL`),
      ),
    ];
    for (const { name } of tables) {
      const [row] = await this.storeRows(
        `SELECT count(*)::VARCHAR AS n, coalesce(sum(hash(t)), 0)::VARCHAR AS h FROM "${String(name)}" t`,
      );
      parts.push(`${String(name)}:${String(row.n)}:${String(row.h)}`);
    }
    return parts.join('\n');
  }
}

/** Runs the reads at once (they are independent), then throws the first failure in list order, so that a report does not depend on timing. */
async function allInOrder(reads: (() => Promise<void>)[]): Promise<void> {
  const results = await Promise.allSettled(reads.map((read) => read()));
  const failed = results.find((result) => result.status === 'rejected');
  if (failed) throw failed.reason;
}
