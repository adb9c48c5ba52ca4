import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { extname, join, resolve } from 'node:path';
import { InvalidQueryError, NotFoundError } from '../api/errors.js';
import type { ExportFormat } from '../api/query.js';
import type { QueryTarget } from '../client/query-client.js';
import { ONE_SHOT_RETRY, StoreAnswerError, StoreUnreachableError } from '../client/store-request.js';
import { hasSpanFiles } from '../store/span-files.js';
import { DuckDBStore } from '../store/store.js';
import { ArgumentError, choiceArg, parseCommandArgs, UsageError } from './args.js';
import { formatResult, type OutputFormat } from './format.js';

export const QUERY_USAGE = `agl query "<SQL>" [--db ./agl.duckdb | --url http://127.0.0.1:4318 | --spans-dir DIR] [--token T]
          [--format table|csv|json|ndjson] [--out FILE.parquet|.csv|.json|.ndjson]
  Runs one read-only SQL query over the store (tables spans, logs). While \`agl serve\` owns the
  file the query goes through it; otherwise the file is opened read-only.
  --spans-dir DIR: over every server's spans moved to a span directory instead (agl serve
  --spans-dir), read in place, with the views (llm_calls, rewards ...).`;

const OUT_FORMATS: Record<string, ExportFormat> = {
  '.parquet': 'parquet',
  '.csv': 'csv',
  '.json': 'json',
  '.ndjson': 'ndjson',
  '.jsonl': 'ndjson',
};

export async function query(args: string[]): Promise<void> {
  const { values, positionals } = parseCommandArgs(args, {
    db: { type: 'string' },
    url: { type: 'string' },
    'spans-dir': { type: 'string' },
    format: { type: 'string' },
    out: { type: 'string' },
    token: { type: 'string' },
  });
  if (positionals.length !== 1) throw new ArgumentError('give the SQL as one argument (in quotes)');
  const format = choiceArg<OutputFormat>('--format', values.format, ['table', 'csv', 'json', 'ndjson'], 'table');
  const outFormat = values.out === undefined ? undefined : OUT_FORMATS[extname(values.out).toLowerCase()];
  if (values.out !== undefined && outFormat === undefined) {
    throw new UsageError(`--out must end in ${Object.keys(OUT_FORMATS).join(', ')}: "${values.out}"`);
  }
  const [sql] = positionals;
  const target = await queryTarget(values);
  try {
    if (values.out !== undefined && outFormat !== undefined) {
      await target.exportTo(sql, resolve(values.out), outFormat);
      console.error(`agl: wrote ${values.out}`);
    } else {
      process.stdout.write(formatResult(await target.query(sql), format));
    }
  } finally {
    await target.close();
  }
}

/** The store that `--db` / `--url` / `--token` name (agl query and agl export alike). */
export async function queryTarget(values: {
  db?: string;
  url?: string;
  token?: string;
  'spans-dir'?: string;
}): Promise<QueryTarget> {
  const given = [values.db, values.url, values['spans-dir']].filter((value) => value !== undefined);
  if (given.length > 1) throw new UsageError('give one of --db, --url and --spans-dir');
  if (values['spans-dir'] !== undefined) return spansDirTarget(resolve(values['spans-dir']));
  const token = values.token ?? (process.env.AGL_TOKEN || undefined);
  return values.url !== undefined
    ? httpTarget(values.url, token)
    : fileOrServerTarget(values.db ?? './agl.duckdb', token);
}

/** Where a running server announces itself (`agl serve` writes it), so `agl query` on the same file can use it. */
export const serverFileOf = (dbPath: string) => `${resolve(dbPath)}.agl-server.json`;

async function fileOrServerTarget(db: string, token: string | undefined): Promise<QueryTarget> {
  const serverFile = serverFileOf(db);
  if (existsSync(serverFile)) {
    const { url } = JSON.parse(await readFile(serverFile, 'utf8')) as { url: string };
    const { serverAnswers } = await import('../client/query-client.js');
    if (await serverAnswers(url)) return httpTarget(url, token);
  }
  if (!existsSync(db)) throw new UsageError(`no database at ${db}: start \`agl serve\` or pass --db FILE or --url URL`);
  let store: DuckDBStore;
  try {
    // The user's own file: a long export or query is theirs to wait for (the server keeps its limit).
    store = await DuckDBStore.open({ path: db, readOnly: true, queryTimeoutMs: Infinity });
  } catch (error) {
    if (/lock/i.test((error as Error).message)) {
      throw new UsageError(
        `${db} is held by another process and no agl server answers for it; pass --url of the server that owns it`,
      );
    }
    throw error;
  }
  return {
    // The user's own file, opened read-only: no need to refuse file-reading table functions.
    query: (sql) => store.query(sql, { guard: false }),
    stream: (sql) => store.streamQuery(sql, { guard: false }),
    exportTo: (sql, path, fmt, onProgress) => store.exportQuery(sql, path, fmt, { guard: false, onProgress }),
    close: () => store.close(),
  };
}

/**
 * Every server's moved spans, read in place: a temporary file whose views (the schema `fleet`,
 * fleet-views.ts) read the span directory's files and what the servers derived from them.
 */
async function spansDirTarget(dir: string): Promise<QueryTarget> {
  if (!existsSync(dir)) throw new UsageError(`no span directory at ${dir}`);
  if (!(await hasSpanFiles(dir)))
    throw new UsageError(`no span files in ${dir}: it is the --spans-dir of no agl serve yet`);
  const folder = await mkdtemp(join(tmpdir(), 'agl-spans-dir-'));
  const removeFolder = () => rm(folder, { recursive: true, force: true });
  let store: DuckDBStore;
  try {
    store = await DuckDBStore.open({
      path: join(folder, 'reader.duckdb'),
      spansDir: dir,
      spansDirReadOnly: true,
      deriveWhenIdleMs: Number.POSITIVE_INFINITY,
      queryTimeoutMs: Number.POSITIVE_INFINITY,
    });
  } catch (error) {
    await removeFolder();
    throw error;
  }
  return {
    query: (sql) => store.query(sql, { guard: false }),
    stream: (sql) => store.streamQuery(sql, { guard: false }),
    exportTo: (sql, path, fmt, onProgress) => store.exportQuery(sql, path, fmt, { guard: false, onProgress }),
    close: async () => {
      await store.close();
      await removeFolder();
    },
  };
}

/**
 * A server's query route, its errors said as the command line says them. The HTTP client loads
 * here, on use: importing undici cost `agl query` and `agl export --db` about 95 ms of CPU at
 * every start.
 */
async function httpTarget(url: string, token: string | undefined): Promise<QueryTarget> {
  const { QueryClient } = await import('../client/query-client.js');
  const client = new QueryClient(url, { token, ...ONE_SHOT_RETRY });
  const said = (error: unknown) => usageErrorOf(error, url);
  return {
    query: (sql) => client.query(sql).catch((error: unknown) => Promise.reject(said(error))),
    stream: async function* (sql) {
      try {
        yield* client.stream(sql);
      } catch (error) {
        throw said(error);
      }
    },
    exportTo: (sql, path, format) =>
      client.exportTo(sql, path, format).catch((error: unknown) => Promise.reject(said(error))),
    close: () => client.close(),
  };
}

function usageErrorOf(error: unknown, url: string): unknown {
  if (error instanceof StoreUnreachableError && error.status === undefined)
    return new UsageError(`cannot reach the agl server at ${url}: ${error.cause ?? error.message}`);
  if (error instanceof InvalidQueryError) return new UsageError(`the query failed (400): ${error.message}`);
  if (error instanceof NotFoundError) return new UsageError(`the query failed (404): ${error.message}`);
  if (error instanceof StoreAnswerError || error instanceof StoreUnreachableError)
    return new UsageError(`the query failed (${error.status}): ${error.detail}`);
  return error;
}
