import { createWriteStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { pipeline } from 'node:stream/promises';
import { parseJsonExact } from '../api/exact-json.js';
import type { ExportFormat, QueryResult } from '../api/query.js';
import { httpRequest, httpStream } from './http-request.js';
import { RETRY_DELAYS_SECONDS, storeHeaders, storeRequest, type AnswerHead } from './store-request.js';

/** Where a query runs: a server's query route, or (the command line's --db) a file opened here. */
export interface QueryTarget {
  /** The rows of one read-only query, batch by batch, in order, with no row limit. */
  stream(sql: string): AsyncIterable<Record<string, unknown>[]>;
  query(sql: string): Promise<QueryResult>;
  /** Writes the rows of one read-only query to a file (DuckDB's COPY); returns how many. */
  exportTo(sql: string, path: string, format: ExportFormat, onProgress?: (fraction: number) => void): Promise<number>;
  close(): Promise<void>;
}

export interface QueryClientOptions {
  /** Sent as `Authorization: Bearer <token>` (agl serve --token). */
  readonly token?: string;
  /**
   * Seconds to wait for an answer to start (default 300). The server stops a query at its own
   * limit (agl serve --query-timeout) and says so; this is for a server that never answers.
   */
  readonly timeoutSeconds?: number;
  /** Delays between retries of a query the server never answered (default 1, 2, 5 s). */
  readonly retryDelaysSeconds?: readonly number[];
  /** Retry a refused connection too (default true; ONE_SHOT_RETRY in store-request.ts says false). */
  readonly retryRefused?: boolean;
}

/** Rows handed on together when a query's rows are streamed. */
const STREAM_BATCH_ROWS = 2048;

/**
 * SQL over a running `agl serve` (`POST /v1/agl/query`), with StoreClient's retry rules and
 * errors (store-request.ts): a query is a read, so one the server never answered is sent again.
 */
export class QueryClient implements QueryTarget {
  private readonly base: string;

  constructor(
    baseUrl: string,
    private readonly options: QueryClientOptions = {},
  ) {
    this.base = `${baseUrl.replace(/\/+$/, '')}/v1/agl`;
  }

  async query(sql: string): Promise<QueryResult> {
    const body = JSON.stringify({ sql });
    const answer = await storeRequest({
      ...this.call(),
      send: () => httpRequest(`${this.base}/query`, 'POST', this.headers(), body, this.timeoutMs),
      text: (error) => error.body,
    });
    return parseJsonExact(answer.body) as QueryResult;
  }

  /** Rows as newline-delimited JSON that the server's COPY wrote: no row limit. */
  async *stream(sql: string): AsyncGenerator<Record<string, unknown>[]> {
    const answer = await this.file(sql, 'ndjson');
    const lines = createInterface({ input: answer.body, crlfDelay: Infinity });
    try {
      let batch: Record<string, unknown>[] = [];
      for await (const line of lines) {
        if (line === '') continue;
        batch.push(parseJsonExact(line) as Record<string, unknown>);
        if (batch.length === STREAM_BATCH_ROWS) {
          yield batch;
          batch = [];
        }
      }
      if (batch.length > 0) yield batch;
    } finally {
      // A reader that stops early leaves the rest unread: the connection is not kept for it. The
      // body destroyed unread errs (undici's "Request aborted"), which readline passed on as an
      // 'error' event nobody listened to any more: it ended the process (found by npm run fuzz).
      lines.close();
      answer.body.on('error', () => {});
      answer.body.destroy();
    }
  }

  async exportTo(sql: string, path: string, format: ExportFormat): Promise<number> {
    if (format === 'json') {
      // The query route writes no JSON files: the rows as one JSON array, as `agl query --format json` prints them.
      const result = await this.query(sql);
      await writeFile(path, `${JSON.stringify(result.rows, null, 2)}\n`);
      return result.rows.length;
    }
    const answer = await this.file(sql, format);
    // Straight to the file: an export can be larger than this process's memory.
    await pipeline(answer.body, createWriteStream(path));
    return Number(answer.headers['x-agl-rows'] ?? 0);
  }

  async close(): Promise<void> {}

  /** The answer to a query as a file the server's COPY wrote, its body not read yet. */
  private file(sql: string, format: Exclude<ExportFormat, 'json'>) {
    const body = JSON.stringify({ sql, format });
    return storeRequest({
      ...this.call(),
      send: () => httpStream(`${this.base}/query`, 'POST', this.headers(), body, this.timeoutMs),
      text: (error) => error.body.text(),
    });
  }

  private call() {
    return {
      base: this.base,
      method: 'POST',
      path: '/query',
      retry: true,
      delaysSeconds: this.options.retryDelaysSeconds ?? RETRY_DELAYS_SECONDS,
      retryRefused: this.options.retryRefused,
    };
  }

  private headers(): Record<string, string> {
    return storeHeaders(this.options.token, true);
  }

  private get timeoutMs(): number {
    return 1000 * (this.options.timeoutSeconds ?? 300);
  }
}

/** Whether an agl server answers at `url` within 2 s (a 401 too: it is there, and wants a token). */
export async function serverAnswers(url: string): Promise<boolean> {
  let answer: AnswerHead;
  try {
    answer = await httpRequest(new URL('/v1/agl/health', url).href, 'GET', {}, undefined, 2000);
  } catch {
    return false;
  }
  return (answer.status >= 200 && answer.status < 300) || answer.status === 401;
}
