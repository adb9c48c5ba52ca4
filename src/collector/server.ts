import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism } from 'node:os';
import type { DuckDBStore } from '../store/store.js';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';
import { BodyError } from './body.js';
import { gateway, type Gateway, type GatewayOptions } from './gateway.js';
import { DecodePool } from './decode-pool.js';
import { browserGuard } from './browser-guard.js';
import { bearerCheck, HttpError, isJsonOrEmpty, sendJson, type Route } from './http.js';
import { GrpcReceiver } from './grpc-server.js';
import { handleOtlp, handleOtlpMetrics } from './otlp-routes.js';
import { feedbackRoute } from './feedback-route.js';
import { handleQuery } from './query-route.js';
import { DASHBOARD_DIR, staticFiles } from './static-files.js';
import { storeRoutes } from './store-routes.js';
import type { TrainingBatchSource } from '../api/training.js';
import { trainingRoutes } from './training-routes.js';
import { ModelRegistry } from './al-v1/model-registry.js';
import { eventRoutes } from './al-v1/event-routes.js';
import { modelRoutes } from './al-v1/model-routes.js';
import { ProxyState, proxyRoutes } from './al-v1/proxy-routes.js';
import { DEFAULT_V1_PROXY, type V1ProxySettings } from './al-v1/proxy-settings.js';
import { rolloutRoutes as v1RolloutRoutes } from './al-v1/rollout-routes.js';

const DEFAULT_HOST = '127.0.0.1';
/** The port of OTLP/HTTP. */
export const DEFAULT_PORT = 4318;
export const DEFAULT_MAX_BODY_BYTES = 64 * 2 ** 20;
/** How long an upstream call through the gateway may take, streaming included. */
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 600_000;

export interface ServerOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default DEFAULT_PORT (4318); 0 for any free port. */
  readonly port?: number;
  /** Largest request body after decompression (default DEFAULT_MAX_BODY_BYTES, 64 MiB). */
  readonly maxBodyBytes?: number;
  /** Threads that decode OTLP bodies (default: one per core beyond the first; 0 = inline). */
  readonly decodeThreads?: number;
  /** When set, every route requires `Authorization: Bearer <token>`. */
  readonly token?: string;
  /** The LLM gateway under /v1/gateway/ (upstream, timeout: DEFAULT_UPSTREAM_TIMEOUT_MS, token ids: off). */
  readonly gateway?: Partial<Omit<GatewayOptions, 'maxBodyBytes' | 'serverToken'>>;
  /** Origins ("http://localhost:3000") whose web pages may call the server, with CORS; other pages are refused. */
  readonly allowOrigins?: readonly string[];
  /** Log a line per store and gateway request (OTLP ingest is not logged: it is the hot path). */
  readonly logRequests?: boolean;
  /** The dashboard's built files, served at every path outside /v1/ (default DASHBOARD_DIR, dist/dashboard). */
  readonly dashboardDir?: string;
  /**
   * The port of OTLP/gRPC on the same host (`agl serve` listens on DEFAULT_GRPC_PORT, 4317); 0 for
   * any free port. Without it there is no OTLP/gRPC.
   */
  readonly grpcPort?: number;
  /** Training batches to serve under /v1/agl/training/ (a GRPO run's, docs/training.md); none by default. */
  readonly training?: TrainingBatchSource;
  /** Agent Lightning v1's proxy settings (its server.yaml's default_proxy; default DEFAULT_V1_PROXY, v1's own). */
  readonly v1Proxy?: V1ProxySettings;
}

/** One line per answered request: method, path, status and time taken. */
function logRequest(request: IncomingMessage, response: ServerResponse, path: string): void {
  const start = performance.now();
  response.once('finish', () => {
    console.log(`agl: ${request.method} ${path} ${response.statusCode} ${(performance.now() - start).toFixed(1)} ms`);
  });
}

export interface RunningServer {
  /** http://host:port */
  readonly url: string;
  readonly server: Server;
  /** host:port of OTLP/gRPC, when it listens. */
  readonly grpcAddress: string | undefined;
  /** Stops accepting connections and waits for requests in flight. */
  close(): Promise<void>;
}

interface MatchedRoute {
  readonly route: Route;
  readonly params: string[];
}

/**
 * The routes that match a path (one per method), in declaration order; a literal segment is
 * declared before a {param} that would match it. Literal paths are a map lookup: OTLP and the
 * gateway's fixed paths are the hot ones.
 */
function compileRoutes(routes: Route[]): (path: string) => MatchedRoute[] {
  const literal = new Map<string, MatchedRoute[]>();
  const patterned: (Route & { pattern: RegExp })[] = [];
  for (const route of routes) {
    if (route.path.includes('{'))
      patterned.push({ ...route, pattern: new RegExp(`^${route.path.replace(/\{[^}]+\}/g, '([^/]+)')}/?$`) });
    else
      for (const path of [route.path, `${route.path}/`])
        literal.set(path, [...(literal.get(path) ?? []), { route, params: [] }]);
  }
  return (path) => {
    const found = literal.get(path);
    if (found) return found;
    const matched: MatchedRoute[] = [];
    for (const route of patterned) {
      const match = route.pattern.exec(path);
      if (match) matched.push({ route, params: match.slice(1).map(decodeURIComponent) });
    }
    return matched;
  };
}

/** The listeners of a server, bound before its store opens. */
interface BoundServer {
  readonly http: Server;
  readonly grpc: GrpcReceiver | undefined;
  /** Stops listening (for a start that failed after binding). */
  close(): void;
}

/**
 * Listens on host:port (and on host:grpcPort) before anything else is opened, so that a port in
 * use fails first; `startServer` then answers on them. Requests that come in between get a 503,
 * exports over gRPC UNAVAILABLE (clients retry).
 */
export async function bindServer(options: ServerOptions = {}): Promise<BoundServer> {
  const http = createServer({ keepAliveTimeout: 65_000 }, answerStarting);
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(options.port ?? DEFAULT_PORT, options.host ?? DEFAULT_HOST, () => {
      http.off('error', reject);
      resolve();
    });
  });
  let grpc: GrpcReceiver | undefined;
  if (options.grpcPort !== undefined) {
    grpc = await GrpcReceiver.listen({
      host: options.host ?? DEFAULT_HOST,
      port: options.grpcPort,
      token: options.token,
      maxMessageBytes: options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES,
    }).catch((error: unknown) => {
      http.close();
      throw error;
    });
  }
  return {
    http,
    grpc,
    close: () => {
      http.close();
      void grpc?.close();
    },
  };
}

function answerStarting(_request: IncomingMessage, response: ServerResponse): void {
  sendJson(response, 503, { detail: 'agl is opening its database; retry in a moment' }, { 'retry-after': '1' });
}

/**
 * The one HTTP server of `agl serve`: OTLP under /v1/traces and /v1/logs, the LightningStore
 * REST API and SQL queries under /v1/agl/ (and a training run's batches, when given), the LLM
 * gateway under /v1/gateway/, the dashboard's files at every other path. Routes are listed here,
 * explicitly; each handler lives in its own module. With `grpcPort`, OTLP/gRPC too, into the
 * same store through the same decoders. It listens on `bound` (from `bindServer`) when given.
 */
export async function startServer(
  store: DuckDBStore,
  options: ServerOptions = {},
  bound?: BoundServer,
): Promise<RunningServer> {
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const { http: server, grpc } = bound ?? (await bindServer(options));
  const decoder = new DecodePool(options.decodeThreads ?? Math.max(1, availableParallelism() - 1));
  grpc?.serve(store, decoder);
  const llmGateway = gateway(store.lightning, store, {
    ...options.gateway,
    timeoutMs: options.gateway?.timeoutMs ?? DEFAULT_UPSTREAM_TIMEOUT_MS,
    returnTokenIds: options.gateway?.returnTokenIds ?? false,
    serverToken: options.token,
    maxBodyBytes,
  });
  // OTLP routes check their content types themselves, to answer in OTLP's encoding.
  const otlpRoutes: Route[] = [
    {
      method: 'POST',
      path: '/v1/traces',
      handle: (req, res) => handleOtlp('traces', req, res, store, decoder, maxBodyBytes),
    },
    {
      method: 'POST',
      path: '/v1/logs',
      handle: (req, res) => handleOtlp('logs', req, res, store, decoder, maxBodyBytes),
    },
    { method: 'POST', path: '/v1/metrics', handle: (req, res) => handleOtlpMetrics(req, res, maxBodyBytes) },
  ];
  const routes: Route[] = [
    ...otlpRoutes,
    // 200 also while degraded (disk full): reads still work and writes answer 503 + Retry-After
    // by themselves, while a 503 here would make a load balancer route away (or Kubernetes
    // restart the server) and stop the very retries that find the disk has room again.
    { method: 'GET', path: '/v1/agl/health', handle: async (_req, res) => sendJson(res, 200, store.health) },
    { method: 'POST', path: '/v1/agl/query', handle: (req, res) => handleQuery(req, res, store) },
    ...storeRoutes(store.lightning),
    feedbackRoute(store, store.lightning),
    ...(options.training ? trainingRoutes(options.training) : []),
    ...llmGateway.routes,
    ...agentLightningV1Routes(store, llmGateway, options.v1Proxy ?? DEFAULT_V1_PROXY),
  ];
  server.off('request', answerStarting);
  server.on('request', requestHandler(routes, new Set(otlpRoutes), options));

  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const httpClosed = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeIdleConnections();
      // Keep-alive clients that keep sending would hold the close open: cut them after a grace.
      setTimeout(() => server.closeAllConnections(), 5_000).unref();
    });
  return {
    url: `http://${host}:${address.port}`,
    server,
    grpcAddress: grpc?.address,
    close: async () => {
      await Promise.all([httpClosed(), grpc?.close()]);
      await llmGateway.flush();
      await decoder.close();
    },
  };
}

/** Agent Lightning v1's server API: rollouts, events, the model registry and the LLM proxy (/api/..., /proxy/...). */
function agentLightningV1Routes(store: DuckDBStore, llmGateway: Gateway, settings: V1ProxySettings): Route[] {
  const registry = new ModelRegistry(store.lightning);
  return [
    ...v1RolloutRoutes(store.lightning),
    ...eventRoutes(store, store.lightning, () => llmGateway.flush()),
    ...modelRoutes(registry),
    ...proxyRoutes(store.lightning, llmGateway, registry, settings, new ProxyState()),
  ];
}

/**
 * Answers each request by its route, after the browser guard and the token check; routes other
 * than GET and `otlp` take JSON bodies only.
 */
function requestHandler(
  routes: Route[],
  otlp: ReadonlySet<Route>,
  options: ServerOptions,
): (request: IncomingMessage, response: ServerResponse) => void {
  const matchRoutes = compileRoutes(routes);
  const guard = browserGuard({ host: options.host ?? DEFAULT_HOST, allowOrigins: options.allowOrigins });
  const authorized = options.token ? bearerCheck(options.token) : () => true;
  const dashboard = staticFiles(options.dashboardDir ?? DASHBOARD_DIR);
  return (request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    if (options.logRequests && (path.startsWith('/v1/agl/') || path.startsWith('/v1/gateway/')))
      logRequest(request, response, path);
    if (!guard(request, response)) return;
    // v1's liveness probe, open as v1's is: it says the process answers, nothing of the data.
    if (path === '/healthz' && request.method === 'GET') return sendJson(response, 200, { status: 'ok' });
    // The dashboard's files hold no data (they are the package's own), so they need no token:
    // a browser cannot put an Authorization header on a page load, and the page asks for the
    // token itself and sends it on every API call. The guard above still applies to them.
    if (path !== '/v1' && !path.startsWith('/v1/') && !isAgentLightningV1Path(path)) {
      dashboard(request, response, path).catch((error: unknown) => answerError(response, error));
      return;
    }
    // v1's routes take the key as x-api-key too, as v1 does (an Anthropic client sends it so).
    const apiKey = request.headers['x-api-key'];
    const v1Key = isAgentLightningV1Path(path) && typeof apiKey === 'string' && authorized(`Bearer ${apiKey}`);
    if (!v1Key && !authorized(request.headers.authorization)) {
      sendJson(
        response,
        401,
        { detail: 'this agl server needs Authorization: Bearer <token> (agl --token or AGL_TOKEN)' },
        { 'www-authenticate': 'Bearer' },
      );
      return;
    }
    let matched: MatchedRoute[];
    try {
      matched = matchRoutes(path);
    } catch {
      sendJson(response, 400, { detail: `the path ${path} is not valid percent-encoding` });
      return;
    }
    const found = matched.find((m) => m.route.method === request.method);
    if (!found) {
      if (matched.length > 0)
        sendJson(
          response,
          405,
          { detail: `${request.method} is not allowed on ${path}` },
          { allow: matched.map((m) => m.route.method).join(', ') },
        );
      else sendJson(response, 404, { detail: `no route ${path}` });
      return;
    }
    if (found.route.method !== 'GET' && !otlp.has(found.route) && !isJsonOrEmpty(request)) {
      const sent = request.headers['content-type'];
      const got = sent === undefined ? 'a body without one' : `not "${sent}"`;
      sendJson(response, 415, { detail: `${request.method} ${path} takes Content-Type: application/json, ${got}` });
      return;
    }
    Promise.resolve()
      .then(() => found.route.handle(request, response, found.params))
      .catch((error: unknown) => answerError(response, error));
  };
}

/** Agent Lightning v1's API paths: its store API under /api/, its LLM proxy under /proxy/. */
const isAgentLightningV1Path = (path: string) => path.startsWith('/api/') || path.startsWith('/proxy/');

function answerError(response: ServerResponse, error: unknown): void {
  if (response.headersSent) {
    response.destroy(error as Error);
    return;
  }
  if (error instanceof HttpError || error instanceof BodyError) {
    sendJson(response, error.status, { detail: error.message });
    return;
  }
  if (error instanceof StoreBusyError || error instanceof StoreUnavailableError) {
    sendJson(response, 503, { detail: error.message }, { 'retry-after': String(error.retryAfterSeconds) });
    return;
  }
  console.error('agl: request failed:', error);
  sendJson(response, 500, { detail: `internal error: ${(error as Error)?.message ?? String(error)}` });
}
