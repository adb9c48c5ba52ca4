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

/** StoreUnavailableError (503 + Retry-After) for an error that says the database is out of reach. */
export function unreachable(error: unknown): StoreUnavailableError | null {
  if (error instanceof StoreUnavailableError) return error;
  const { code, message } = error as { code?: string; message?: string };
  const connectionLost =
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/.test(
      message ?? '',
    );
  if ((code && (UNREACHABLE.test(code) || SOCKET_ERRORS.has(code))) || connectionLost)
    return new StoreUnavailableError(`PostgreSQL is out of reach: ${message ?? code}`, false, 2);
  return null;
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

  constructor(url: string, options: PostgresOptions = {}) {
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
    return this.reaching(async () => (await this.pool.query<R>(text, values)).rows);
  }

  /** Runs `work` in a transaction; again (from the start) when PostgreSQL undid it for a deadlock. */
  async transaction<T>(work: (tx: Sql) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.reaching(() => this.once(work));
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

  private async once<T>(work: (tx: Sql) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await work({ query: async (text, values) => (await client.query(text, values)).rows });
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch((rollback: Error) => (broken = rollback));
      throw error;
    } finally {
      client.release(broken);
    }
  }

  private async reaching<T>(work: () => Promise<T>): Promise<T> {
    try {
      const result = await work();
      this.failure = null;
      return result;
    } catch (error) {
      throw this.noteFailure(error);
    }
  }

  private noteFailure(error: unknown): unknown {
    const failed = unreachable(error);
    if (!failed) return error;
    if (this.failure === null) console.error(`agl: ${failed.reason}; state changes get 503 until it is back`);
    this.failure = failed.reason;
    return failed;
  }
}
