import { createHash } from 'node:crypto';
import pg from 'pg';
import { StoreUnavailableError } from '../../api/errors.js';

/** A statement runner: the pool (one statement, any connection) or a transaction's connection. */
export interface Sql {
  query<R extends object>(text: string, values?: unknown[]): Promise<R[]>;
}

// Two transactions that locked in opposite orders (40P01), or a serializable conflict (40001):
// PostgreSQL undid one, which may simply run again.
const RETRIED_STATES = new Set(['40P01', '40001']);
const ATTEMPTS = 8;

// The database cannot be reached or is shutting down: SQLSTATE class 08 (connection exception),
// 57P01-57P03 (shutdown, cannot connect now), 53300 (too many connections); or the socket failed.
const UNREACHABLE = /^(08|57P0[1-3]|53300$)/;
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTFOUND']);

/** host:port of a PostgreSQL URL, for messages (never the password). */
export function addressOf(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname || 'localhost'}:${parsed.port || 5432}`;
  } catch {
    return 'the --state URL';
  }
}

/**
 * StoreUnavailableError (503 + Retry-After) for an error that says the database at `address`
 * (host:port) is out of reach.
 */
export function unreachable(error: unknown, address: string): StoreUnavailableError | null {
  if (error instanceof StoreUnavailableError) return error;
  const { code, message } = error as { code?: string; message?: string };
  const connectionLost =
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/.test(
      message ?? '',
    );
  if ((code && (UNREACHABLE.test(code) || SOCKET_ERRORS.has(code))) || connectionLost)
    return new StoreUnavailableError(`the PostgreSQL state at ${address} is unreachable: ${message ?? code}`, false, 2);
  return null;
}

/**
 * A statement with parameters as a named prepared statement (named by its text's hash): each
 * connection parses it once. agl's statements are a few dozen texts, and its writes' upserts
 * took several milliseconds to parse and plan each time.
 */
function prepared(text: string, values: unknown[] | undefined): pg.QueryConfig {
  if (values === undefined) return { text };
  return { name: `agl_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`, text, values };
}

/**
 * BEGIN, and `statement` with it in one round trip (a simple query answers a result per
 * statement); the statement's rows.
 */
async function begin(client: pg.PoolClient, statement: string | undefined): Promise<Record<string, unknown>[]> {
  if (statement === undefined) {
    await client.query('BEGIN');
    return [];
  }
  const results = (await client.query(`BEGIN; ${statement}`)) as unknown as pg.QueryResult<Record<string, unknown>>[];
  return results[1].rows;
}

export interface PostgresOptions {
  /** Connections of the pool (default 16). */
  readonly maxConnections?: number;
}

/**
 * A pool of connections to the PostgreSQL database that holds the shared state. Transactions
 * are READ COMMITTED and lock what they change (rows FOR UPDATE, advisory locks); one that
 * PostgreSQL undid for a deadlock runs again. Errors that mean the database is out of reach
 * become StoreUnavailableError, so that clients retry after the 503.
 */
export class PgDatabase implements Sql {
  /** Why the last statement could not reach the database (null: the last one did). */
  failure: string | null = null;
  private readonly pool: pg.Pool;
  /** host:port, as messages name the database. */
  private readonly address: string;

  constructor(url: string, options: PostgresOptions = {}) {
    this.address = addressOf(url);
    this.pool = new pg.Pool({
      connectionString: url,
      max: options.maxConnections ?? 16,
      application_name: 'agl',
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
    });
    // An idle connection that breaks (the server restarted) is dropped from the pool; the next
    // statement opens another. Without a listener the error would end the process.
    this.pool.on('error', (error) => this.noteFailure(error));
  }

  async query<R extends object>(text: string, values?: unknown[]): Promise<R[]> {
    return this.reaching(async () => (await this.pool.query<R>(prepared(text, values))).rows);
  }

  /** Statements without parameters, in one round trip (the simple protocol). */
  async simple(text: string): Promise<void> {
    await this.reaching(() => this.pool.query(text));
  }

  /**
   * Runs `work` in a transaction; again (from the start) when PostgreSQL undid it for a deadlock.
   * `opening`, a statement without parameters, is sent with the BEGIN (one round trip) and its
   * rows handed to `work`.
   */
  async transaction<T>(work: (tx: Sql, opened: Record<string, unknown>[]) => Promise<T>, opening?: string): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.reaching(() => this.once(work, opening));
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (!code || !RETRIED_STATES.has(code) || attempt === ATTEMPTS) throw error;
      }
    }
  }

  /** A connection of its own (LISTEN holds one for as long as it listens). */
  connectClient(): pg.Client {
    return new pg.Client(this.pool.options);
  }

  close(): Promise<void> {
    return this.pool.end();
  }

  private async once<T>(
    work: (tx: Sql, opened: Record<string, unknown>[]) => Promise<T>,
    opening: string | undefined,
  ): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    // The pool listens for 'error' only on its idle connections: one that breaks while a
    // transaction holds it (the server shut down) emits 'error' with no listener, which ends the
    // process. Its statement fails too, and the broken connection leaves the pool on release.
    const onError = (error: Error) => (broken = error);
    client.on('error', onError);
    try {
      const opened = await begin(client, opening);
      const result = await work(
        {
          query: async <R extends object>(text: string, values?: unknown[]) =>
            (await client.query<R>(prepared(text, values))).rows,
        },
        opened,
      );
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch((rollback: Error) => (broken = rollback));
      throw error;
    } finally {
      client.removeListener('error', onError);
      client.release(broken);
    }
  }

  private async reaching<T>(work: () => Promise<T>): Promise<T> {
    try {
      const result = await work();
      if (this.failure !== null) console.error(`agl: the PostgreSQL state at ${this.address} answers again`);
      this.failure = null;
      return result;
    } catch (error) {
      throw this.noteFailure(error);
    }
  }

  private noteFailure(error: unknown): unknown {
    const failed = unreachable(error, this.address);
    if (!failed) return error;
    if (this.failure === null) console.error(`agl: ${failed.reason}; state changes get 503 until it is back`);
    this.failure = failed.reason;
    return failed;
  }
}
