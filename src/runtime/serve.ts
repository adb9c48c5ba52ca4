import { rm, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { isLoopbackHost, parseOrigin } from '../collector/browser-guard.js';
import { bindServer, startServer, type RunningServer } from '../collector/server.js';
import { DuckDBStore } from '../store/store.js';
import { serverFileOf } from './query-command.js';
import { bytesArg, CommandError, countArg, parseCommandArgs, portArg, secondsArg, urlArg, UsageError } from './args.js';
import type { StoreOptions } from '../store/store.js';

export const SERVE_USAGE = `agl serve [--host 127.0.0.1] [--port 4318] [--db ./agl.duckdb] [--max-body 64MiB]
          [--max-queue 64MiB] [--decode-threads N] [--checkpoint-threshold 1GiB]
          [--write-memory 64MiB] [--query-timeout 30] [--token T] [--allow-origin URL]
          [--upstream URL] [--upstream-key KEY] [--upstream-timeout 600] [--return-token-ids]
          [--return-logprobs] [--pass-agent-key] [--quiet]
  Receives OpenTelemetry data (OTLP/HTTP, protobuf or JSON, on /v1/traces and /v1/logs) and
  stores it in a DuckDB file; answers agl's API under /v1/agl/ and records LLM calls made
  through its OpenAI-compatible gateway under /v1/gateway/. Stops cleanly on Ctrl-C.
  --write-memory: memory that rows written but not yet checkpointed into the file may hold
  while writes run (at least 16MiB); the rest waits in the temporary folder beside the file.
  --query-timeout: seconds a query or an export through the server may run.
  --token (or AGL_TOKEN): every request must carry Authorization: Bearer <token>.
  --allow-origin: a web page origin (http://localhost:3000) that may call the server, with
  CORS (repeat it or separate origins with commas); requests from other pages are refused.
  --upstream: the model server (base URL with its /v1) for gateway calls whose rollout has no
  "llm" resource; --upstream-key (or AGL_UPSTREAM_KEY) is its API key.
  --upstream-timeout: seconds an upstream call may take, streaming included.
  --return-token-ids, --return-logprobs: ask the upstream (vLLM) for token ids, and for the
  logprobs of the sampled tokens, on completion calls.
  --pass-agent-key: send the agent's own API key on to an upstream that has none configured.
  Each store and gateway request is logged on a line of its own (OTLP ingest is not); --quiet
  logs only the start and the stop.`;

export async function serve(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    db: { type: 'string', default: './agl.duckdb' },
    'max-body': { type: 'string' },
    'max-queue': { type: 'string' },
    'decode-threads': { type: 'string' },
    'checkpoint-threshold': { type: 'string' },
    'write-memory': { type: 'string' },
    'query-timeout': { type: 'string' },
    token: { type: 'string' },
    'allow-origin': { type: 'string', multiple: true },
    upstream: { type: 'string' },
    'upstream-key': { type: 'string' },
    'upstream-timeout': { type: 'string' },
    'return-token-ids': { type: 'boolean', default: false },
    'return-logprobs': { type: 'boolean', default: false },
    'pass-agent-key': { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  });
  // Every argument is checked before anything is opened.
  const path = resolve(values.db);
  const port = portArg(values.port, 4318);
  const serverOptions = {
    host: values.host,
    port,
    maxBodyBytes: bytesArg('--max-body', values['max-body'], 64 * 1024 ** 2),
    decodeThreads: countArg('--decode-threads', values['decode-threads']),
    token: values.token ?? (process.env.AGL_TOKEN || undefined),
    allowOrigins: originsArg(values['allow-origin']),
    logRequests: !values.quiet,
    gateway: {
      upstream: urlArg('--upstream', values.upstream),
      upstreamKey: values['upstream-key'] ?? (process.env.AGL_UPSTREAM_KEY || undefined),
      timeoutMs: 1000 * secondsArg('--upstream-timeout', values['upstream-timeout'], 600),
      returnTokenIds: values['return-token-ids'],
      returnLogprobs: values['return-logprobs'],
      passAgentKey: values['pass-agent-key'],
    },
  };
  const storeOptions = {
    maxQueuedBytes: bytesArg('--max-queue', values['max-queue'], 64 * 1024 ** 2),
    checkpointThreshold: values['checkpoint-threshold'] === undefined ? undefined : `${bytesArg('--checkpoint-threshold', values['checkpoint-threshold'], 0)}B`,
    writeMemoryBytes: writeMemoryArg(values['write-memory']),
    queryTimeoutMs: 1000 * secondsArg('--query-timeout', values['query-timeout'], 30),
  };
  // V8 grows the young generation to 128 MB under ingest (request buffers and decoded columns
  // live until their commit), which is most of a busy server's JS memory and bought no
  // throughput: keep it at the size it has by now. The flag is read whenever it would grow.
  setFlagsFromString('--semi-space-growth-factor=1');
  if (!serverOptions.token && !isLoopbackHost(values.host)) {
    console.error(
      `agl: warning: listening on ${values.host} without --token: anyone who can reach this address can read ` +
        "all stored data, enqueue work and redirect agents' LLM calls; set --token (or AGL_TOKEN)",
    );
  }
  // The port first: one in use must fail before the database file is created.
  const bound = await bindServer(serverOptions).catch((error: unknown) => {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') throw new CommandError(`${values.host}:${port} is already in use: stop what listens there or pick another --port`);
    if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND') throw new CommandError(`cannot listen on ${values.host}: no such local address`);
    throw error;
  });
  let store: DuckDBStore;
  let server: RunningServer;
  try {
    store = await openStoreOrExplain(path, storeOptions);
  } catch (error) {
    bound.close();
    throw error;
  }
  try {
    server = await startServer(store, serverOptions, bound);
  } catch (error) {
    bound.close();
    await store.close();
    throw error;
  }
  const serverFile = serverFileOf(path);
  await writeFile(serverFile, JSON.stringify({ url: server.url, pid: process.pid }));
  console.log(`agl: serving on ${server.url}, storing in ${path}`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      console.error(`agl: ${signal} again, exiting without waiting`);
      process.exit(130);
    }
    stopping = true;
    console.log(`agl: ${signal}, finishing writes and closing ${path}`);
    await server.close();
    await store.close();
    await rm(serverFile, { force: true });
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

/** --allow-origin, repeated or comma-separated, as origins. */
function originsArg(values: string[] | undefined): string[] {
  return (values ?? []).flatMap((value) => value.split(',')).filter((value) => value.trim() !== '').map((value) => {
    const origin = parseOrigin(value);
    if (origin === undefined) throw new UsageError(`--allow-origin must be a web page origin such as http://localhost:3000, not "${value}"`);
    return origin;
  });
}

/**
 * Below this, groups of LLM-sized spans mostly run out of memory and are written twice (see the
 * writer): at 16 MiB they already went in at 10,000-12,000 spans/s, at 64 MiB 17,000-19,000.
 */
const MIN_WRITE_MEMORY = 16 * 1024 ** 2;

/** --write-memory in bytes; undefined for the store's default. */
function writeMemoryArg(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const bytes = bytesArg('--write-memory', value, 0);
  if (bytes < MIN_WRITE_MEMORY) throw new UsageError(`--write-memory must be at least 16MiB, not "${value}"`);
  return bytes;
}

async function openStoreOrExplain(path: string, options: Omit<StoreOptions, 'path'>): Promise<DuckDBStore> {
  try {
    return await DuckDBStore.open({ ...options, path });
  } catch (error) {
    const message = (error as Error).message;
    const holder = /Conflicting lock is held in .* \(PID (\d+)\)/.exec(message);
    if (holder) throw new CommandError(`${path} is in use by process ${holder[1]} (another agl serve?); one server owns a file`);
    throw new CommandError(`cannot open ${path}: ${message}`);
  }
}
