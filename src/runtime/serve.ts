import { genAiRecordingOf } from '../otlp/genai-documents.js';
import { rm, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { isLoopbackHost, parseOrigin } from '../collector/browser-guard.js';
import { DEFAULT_GRPC_PORT } from '../collector/grpc-server.js';
import {
  bindServer,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_PORT,
  DEFAULT_UPSTREAM_TIMEOUT_MS,
  startServer,
  type RunningServer,
  type ServerOptions,
} from '../collector/server.js';
import {
  DEFAULT_MAX_QUEUED_BYTES,
  DEFAULT_QUERY_TIMEOUT_MS,
  DEFAULT_SPANS_MOVE_EVERY_MS,
  DEFAULT_WRITE_MEMORY_BYTES,
  DuckDBStore,
  type StoreOptions,
} from '../store/store.js';
import { StoreUnavailableError } from '../api/errors.js';
import { SERVER_ID } from '../store/span-files.js';
import { serverFileOf } from './query-command.js';
import { v1Settings, type V1ServerSettings } from './v1-config.js';
import { bytesArg, CommandError, countArg, parseCommandArgs, portArg, secondsArg, urlArg, UsageError } from './args.js';

const mib = (bytes: number) => `${bytes / 2 ** 20}MiB`;

// The defaults shown are the server's and the store's own: an option not given is left to them.
export const SERVE_USAGE = `agl serve [--host 127.0.0.1] [--port ${DEFAULT_PORT}] [--grpc-port ${DEFAULT_GRPC_PORT}] [--db ./agl.duckdb] [--state postgres://...]
          [--max-body ${mib(DEFAULT_MAX_BODY_BYTES)}] [--max-queue ${mib(DEFAULT_MAX_QUEUED_BYTES)}] [--decode-threads N] [--checkpoint-threshold 1GiB]
          [--memory-limit SIZE] [--write-memory ${mib(DEFAULT_WRITE_MEMORY_BYTES)}] [--query-timeout ${DEFAULT_QUERY_TIMEOUT_MS / 1000}] [--token T] [--allow-origin URL]
          [--upstream URL] [--upstream-key KEY] [--anthropic-upstream URL] [--anthropic-upstream-key KEY]
          [--upstream-timeout ${DEFAULT_UPSTREAM_TIMEOUT_MS / 1000}] [--return-token-ids]
          [--return-logprobs] [--pass-agent-key] [--spans-dir DIR] [--server-id ID]
          [--spans-move-every ${DEFAULT_SPANS_MOVE_EVERY_MS / 1000}] [--v1-config server.yaml] [--v1-model NAME] [--quiet]
  Receives OpenTelemetry data (OTLP/HTTP, protobuf or JSON, on /v1/traces and /v1/logs, and
  OTLP/gRPC on --grpc-port, 0 for none) and stores it in a DuckDB file; answers agl's API
  under /v1/agl/ and records LLM calls made through its OpenAI- and Anthropic-compatible
  gateway under /v1/gateway/. Stops cleanly on Ctrl-C.
  --state (or AGL_STATE): a PostgreSQL URL; rollouts, attempts, resources, workers and the
  queue live there, shared by every agl serve that names it (several servers behind one load
  balancer); spans stay in each server's --db file. Without it, all of it lives in --db.
  --max-body: the largest OTLP request or gRPC message, after decompression.
  --spans-dir: a directory shared by servers: spans move there as Parquet files every
  --spans-move-every seconds (and on stop), and every query, view and export through the
  server reads every server's spans; --server-id names this server there (default: a random
  id kept in --db).
  --memory-limit: the most memory DuckDB may use, its cache of the file and what queries need
  (default a quarter of the machine's); queries spill into the temporary folder beside the file
  beyond it.
  --write-memory: memory that rows written but not yet checkpointed into the file may hold
  while writes run (at least 16MiB); the rest waits in the temporary folder beside the file.
  --query-timeout: seconds a query or an export through the server may run.
  --token (or AGL_TOKEN): every request must carry Authorization: Bearer <token> (over gRPC,
  as the metadata authorization; the gRPC health service needs none).
  --allow-origin: a web page origin (http://localhost:3000) that may call the server, with
  CORS (repeat it or separate origins with commas); requests from other pages are refused.
  --upstream: the model server (base URL with its /v1) for gateway calls whose rollout has no
  "llm" resource; --upstream-key (or AGL_UPSTREAM_KEY) is its API key.
  --anthropic-upstream: the same for Anthropic Messages calls (/v1/messages), a base URL as
  ANTHROPIC_BASE_URL takes it; --anthropic-upstream-key (or AGL_ANTHROPIC_UPSTREAM_KEY) is
  its x-api-key. The agent's anthropic-version and anthropic-beta headers go on as sent.
  --upstream-timeout: seconds an upstream call may take, streaming included.
  --return-token-ids, --return-logprobs: ask the upstream (vLLM) for token ids, and for the
  logprobs of the sampled tokens, on completion calls.
  --pass-agent-key: send the agent's own API key on to an upstream that has none configured.
  --v1-config: Agent Lightning v1's server.yaml (YAML or JSON): its default_proxy (the served
  model, the train and val sampling parameters, include_log_probs) for v1's proxy under
  /proxy/, and its host, port and key where --host, --port and --token are not given.
  --v1-model: the served model (default_proxy.model_name; default Qwen/Qwen2.5-7B-Instruct,
  v1's): calls through v1's proxy go to the endpoints registered for it (POST /api/models).
  Each store and gateway request is logged on a line of its own (OTLP ingest is not); --quiet
  logs only the start and the stop.`;

const OPTIONS = {
  host: { type: 'string' },
  port: { type: 'string' },
  'grpc-port': { type: 'string' },
  db: { type: 'string', default: './agl.duckdb' },
  state: { type: 'string' },
  'max-body': { type: 'string' },
  'max-queue': { type: 'string' },
  'decode-threads': { type: 'string' },
  'checkpoint-threshold': { type: 'string' },
  'memory-limit': { type: 'string' },
  'write-memory': { type: 'string' },
  'query-timeout': { type: 'string' },
  token: { type: 'string' },
  'allow-origin': { type: 'string', multiple: true },
  upstream: { type: 'string' },
  'upstream-key': { type: 'string' },
  'anthropic-upstream': { type: 'string' },
  'anthropic-upstream-key': { type: 'string' },
  'upstream-timeout': { type: 'string' },
  'return-token-ids': { type: 'boolean', default: false },
  'return-logprobs': { type: 'boolean', default: false },
  'pass-agent-key': { type: 'boolean', default: false },
  'spans-dir': { type: 'string' },
  'server-id': { type: 'string' },
  'spans-move-every': { type: 'string' },
  'v1-config': { type: 'string' },
  'v1-model': { type: 'string' },
  quiet: { type: 'boolean', default: false },
} as const;

type Values = ReturnType<typeof parseCommandArgs<typeof OPTIONS>>['values'];

export async function serve(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, OPTIONS);
  // Every argument is checked before anything is opened.
  const path = resolve(values.db);
  const serverOptions = serverOptionsOf(values, await v1Settings(values['v1-config'], values['v1-model']));
  const storeOptions = storeOptionsOf(values);
  // V8 grows the young generation to 128 MB under ingest (request buffers and decoded columns
  // live until their commit), which is most of a busy server's JS memory and bought no
  // throughput: keep it at the size it has by now. The flag is read whenever it would grow.
  setFlagsFromString('--semi-space-growth-factor=1');
  if (!serverOptions.token && serverOptions.host !== undefined && !isLoopbackHost(serverOptions.host)) {
    console.error(
      `agl: warning: listening on ${serverOptions.host} without --token: anyone who can reach this address can read ` +
        "all stored data, enqueue work and redirect agents' LLM calls; set --token (or AGL_TOKEN)",
    );
  }
  const { server, store } = await openServer(path, serverOptions, storeOptions);
  const serverFile = serverFileOf(path);
  await writeFile(serverFile, JSON.stringify({ url: server.url, pid: process.pid }));
  const state = storeOptions.state === undefined ? '' : `, state in ${withoutPassword(storeOptions.state)}`;
  const grpc = server.grpcAddress === undefined ? '' : `, OTLP/gRPC on ${server.grpcAddress}`;
  // Signals are handled before the line that says the server is up: whoever waits for that line
  // (a supervisor, a test) may stop the server at once.
  stopOnSignals(async () => {
    await server.close();
    await store.close();
    await rm(serverFile, { force: true });
  }, path);
  console.log(`agl: serving on ${server.url}${grpc}, storing in ${path}${state}`);
}

/**
 * The server's options from the command line (and Agent Lightning v1's server.yaml, for what the
 * flags do not say); each one not given is left to the server's default.
 */
function serverOptionsOf(values: Values, v1: V1ServerSettings): ServerOptions {
  const upstreamTimeout = secondsArg('--upstream-timeout', values['upstream-timeout']);
  return {
    host: values.host ?? v1.host,
    port: portArg(values.port) ?? v1.port,
    grpcPort: grpcPortArg(values['grpc-port']),
    maxBodyBytes: bytesArg('--max-body', values['max-body']),
    decodeThreads: countArg('--decode-threads', values['decode-threads']),
    token: values.token ?? (process.env.AGL_TOKEN || undefined) ?? v1.key,
    v1Proxy: v1.proxy,
    allowOrigins: originsArg(values['allow-origin']),
    logRequests: !values.quiet,
    gateway: {
      upstream: urlArg('--upstream', values.upstream),
      upstreamKey: values['upstream-key'] ?? (process.env.AGL_UPSTREAM_KEY || undefined),
      anthropicUpstream: urlArg('--anthropic-upstream', values['anthropic-upstream']),
      anthropicUpstreamKey: values['anthropic-upstream-key'] ?? (process.env.AGL_ANTHROPIC_UPSTREAM_KEY || undefined),
      timeoutMs: upstreamTimeout === undefined ? undefined : 1000 * upstreamTimeout,
      returnTokenIds: values['return-token-ids'],
      returnLogprobs: values['return-logprobs'],
      passAgentKey: values['pass-agent-key'],
      genAi: genAiRecordingOf(process.env),
    },
  };
}

/** --grpc-port: 4317 when not given, 0 for no OTLP/gRPC (undefined). */
function grpcPortArg(value: string | undefined): number | undefined {
  const port = portArg(value, '--grpc-port') ?? DEFAULT_GRPC_PORT;
  return port === 0 ? undefined : port;
}

/** The store's options from the command line; each one not given is left to the store's default. */
function storeOptionsOf(values: Values): Omit<StoreOptions, 'path'> {
  const checkpointThreshold = values['checkpoint-threshold'];
  const queryTimeout = secondsArg('--query-timeout', values['query-timeout']);
  const moveEvery = secondsArg('--spans-move-every', values['spans-move-every']);
  const serverId = values['server-id'];
  if (serverId !== undefined && !SERVER_ID.test(serverId))
    throw new UsageError(`--server-id is 1-64 letters, digits, '.', '_' or '-', not "${serverId}"`);
  return {
    maxQueuedBytes: bytesArg('--max-queue', values['max-queue']),
    checkpointThreshold:
      checkpointThreshold === undefined ? undefined : `${bytesArg('--checkpoint-threshold', checkpointThreshold)}B`,
    ...memoryArgs(values['memory-limit'], values['write-memory']),
    queryTimeoutMs: queryTimeout === undefined ? undefined : 1000 * queryTimeout,
    state: stateArg(values.state ?? (process.env.AGL_STATE || undefined)),
    spansDir: values['spans-dir'] === undefined ? undefined : resolve(values['spans-dir']),
    serverId,
    spansMoveEveryMs: moveEvery === undefined ? undefined : 1000 * moveEvery,
  };
}

/** --state: a postgres:// (or postgresql://) URL. */
function stateArg(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!/^postgres(ql)?:\/\/./.test(value))
    throw new UsageError(`--state must be a PostgreSQL URL such as postgres://agl@db.internal/agl, not "${value}"`);
  return value;
}

/** A database URL as it may be shown: its password left out. */
function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'the --state database';
  }
}

/** Binds the port, opens the store, then serves: a port in use fails before the database file is created. */
async function openServer(
  path: string,
  serverOptions: ServerOptions,
  storeOptions: Omit<StoreOptions, 'path'>,
): Promise<{ server: RunningServer; store: DuckDBStore }> {
  const bound = await bindServer(serverOptions).catch((error: unknown) => {
    throw bindError(error, serverOptions);
  });
  let store: DuckDBStore;
  try {
    store = await openStoreOrExplain(path, storeOptions);
  } catch (error) {
    bound.close();
    throw error;
  }
  try {
    return { server: await startServer(store, serverOptions, bound), store };
  } catch (error) {
    bound.close();
    await store.close();
    throw error;
  }
}

/** What a failed listen means to the user, for the errors a wrong --host, --port or --grpc-port gives. */
function bindError(error: unknown, options: ServerOptions): unknown {
  const { code, address, port } = error as NodeJS.ErrnoException & { address?: string; port?: number };
  if (code === 'EADDRINUSE') {
    const flag = port === options.grpcPort ? '--grpc-port (0 for no OTLP/gRPC)' : '--port';
    return new CommandError(`${address}:${port} is already in use: stop what listens there or pick another ${flag}`);
  }
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND')
    return new CommandError(`cannot listen on ${options.host ?? address}: no such local address`);
  return error;
}

/** Ctrl-C or SIGTERM: `close` finishes the writes and closes the file; a second signal exits at once. */
function stopOnSignals(close: () => Promise<void>, path: string): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      console.error(`agl: ${signal} again, exiting without waiting`);
      process.exit(130);
    }
    stopping = true;
    console.log(`agl: ${signal}, finishing writes and closing ${path}`);
    await close();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

/** --allow-origin, repeated or comma-separated, as origins. */
function originsArg(values: string[] | undefined): string[] {
  return (values ?? [])
    .flatMap((value) => value.split(','))
    .filter((value) => value.trim() !== '')
    .map((value) => {
      const origin = parseOrigin(value);
      if (origin === undefined)
        throw new UsageError(`--allow-origin must be a web page origin such as http://localhost:3000, not "${value}"`);
      return origin;
    });
}

/**
 * Below this, groups of LLM-sized spans mostly run out of memory and are written twice (see the
 * writer): at 16 MiB they already went in at 10,000-12,000 spans/s, at 64 MiB 17,000-19,000.
 */
const MIN_WRITE_MEMORY = 16 * 1024 ** 2;

/** --memory-limit and --write-memory in bytes; each undefined for the store's default. */
function memoryArgs(
  limit: string | undefined,
  write: string | undefined,
): Pick<StoreOptions, 'memoryLimitBytes' | 'writeMemoryBytes'> {
  const memoryLimitBytes = bytesArg('--memory-limit', limit);
  const writeMemoryBytes = bytesArg('--write-memory', write);
  if (writeMemoryBytes !== undefined && writeMemoryBytes < MIN_WRITE_MEMORY)
    throw new UsageError(`--write-memory must be at least 16MiB, not "${write}"`);
  const writes = writeMemoryBytes ?? DEFAULT_WRITE_MEMORY_BYTES;
  if (memoryLimitBytes !== undefined && memoryLimitBytes < writes)
    throw new UsageError(`--memory-limit must be at least --write-memory (${mib(writes)}), not "${limit}"`);
  return { memoryLimitBytes, writeMemoryBytes };
}

async function openStoreOrExplain(path: string, options: Omit<StoreOptions, 'path'>): Promise<DuckDBStore> {
  try {
    return await DuckDBStore.open({ ...options, path });
  } catch (error) {
    const message = error instanceof StoreUnavailableError ? error.reason : (error as Error).message;
    const holder = /Conflicting lock is held in .* \(PID (\d+)\)/.exec(message);
    if (holder)
      throw new CommandError(`${path} is in use by process ${holder[1]} (another agl serve?); one server owns a file`);
    if (
      options.state !== undefined &&
      /PostgreSQL|ECONNREFUSED|password|database .* does not exist|getaddrinfo/.test(message)
    )
      throw new CommandError(`cannot use the --state database ${withoutPassword(options.state)}: ${message}`);
    throw new CommandError(`cannot open ${path}: ${message}`);
  }
}
