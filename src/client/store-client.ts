import {
  addSpansInOrder,
  dequeueOne,
  type LightningStore,
  type ResourcesQuery,
  type RolloutQuery,
  type StoreStatistics,
  type WorkerQuery,
} from '../api/lightning-store.js';
import { httpRequest, type HttpAnswer } from './http-request.js';
import { InvalidQueryError, NotFoundError } from '../api/errors.js';
import type {
  Attempt,
  AttemptedRollout,
  AttemptUpdate,
  NamedResources,
  PaginatedResult,
  Pagination,
  ResourcesUpdate,
  Rollout,
  RolloutRequest,
  RolloutUpdate,
  Span,
  SpanQuery,
  Worker,
} from '../api/types.js';

export interface StoreClientOptions {
  /** Sent as `Authorization: Bearer <token>` (agl serve --token). */
  readonly token?: string;
  /** Per-request time limit in seconds, long polls excepted (default 30). */
  readonly timeoutSeconds?: number;
  /** Delays between retries of a request the server never answered (default 1, 2, 5 s). */
  readonly retryDelaysSeconds?: readonly number[];
}

interface RequestOptions {
  /** Retry after network errors: always (reads, updates that set a state), never, or only when the request was never sent ('unsent': calls that create something). */
  readonly retry?: boolean | 'unsent';
  readonly timeoutSeconds?: number;
}

/**
 * The store did not answer (refused, reset, timed out), or a proxy or the store itself said it
 * is unavailable for now (502, 503, 504): the same call may succeed later.
 */
export class StoreUnreachableError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'StoreUnreachableError';
  }
}

/** The store answered with an error that retrying will not fix (a 500, a 401, ...). */
export class StoreAnswerError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
    this.name = 'StoreAnswerError';
  }
}

/** Answers that say the store (or the way to it) is away for now, not that the call is wrong. */
const UNAVAILABLE_STATUSES = new Set([502, 503, 504]);

/** The server's own cap on one long poll; longer waits are several requests. */
const LONG_POLL_SECONDS = 60;

/**
 * The LightningStore of a remote `agl serve` (or any Agent Lightning v0.x store server), over
 * its REST API. Errors come back as the embedded store raises them: NotFoundError for unknown
 * ids, InvalidQueryError for requests the server refused as bad; StoreUnreachableError when
 * the store is away, StoreAnswerError for its other error answers.
 */
export class StoreClient implements LightningStore {
  private readonly base: string;

  constructor(
    baseUrl: string,
    private readonly options: StoreClientOptions = {},
  ) {
    this.base = `${baseUrl.replace(/\/+$/, '')}/v1/agl`;
  }

  async enqueueRollout(request: RolloutRequest): Promise<Rollout> {
    return (await this.enqueueManyRollouts([request]))[0];
  }

  enqueueManyRollouts(requests: RolloutRequest[]): Promise<Rollout[]> {
    return this.post('/queues/rollouts/enqueue', { rollouts: requests }, { retry: 'unsent' });
  }

  dequeueRollout(options: { workerId?: string | null; waitSeconds?: number } = {}): Promise<AttemptedRollout | null> {
    return dequeueOne(this, options);
  }

  async dequeueManyRollouts(
    options: { limit?: number; workerId?: string | null; waitSeconds?: number } = {},
  ): Promise<AttemptedRollout[]> {
    const deadline = Date.now() + (options.waitSeconds ?? 0) * 1000;
    for (;;) {
      const wait = Math.min(LONG_POLL_SECONDS, Math.max(0, (deadline - Date.now()) / 1000));
      // Not retried: a dequeue the server handled but whose answer was lost must not hand out twice.
      const taken = await this.post<AttemptedRollout[]>(
        '/queues/rollouts/dequeue',
        { limit: options.limit ?? 1, worker_id: options.workerId ?? null, wait_seconds: wait },
        { retry: false, timeoutSeconds: wait + this.timeout },
      );
      if (taken.length > 0 || Date.now() >= deadline) return taken;
    }
  }

  startRollout(request: RolloutRequest & { worker_id?: string | null }): Promise<AttemptedRollout> {
    return this.post('/rollouts', request, { retry: 'unsent' });
  }

  startAttempt(rolloutId: string, workerId: string | null = null): Promise<AttemptedRollout> {
    return this.post(`/rollouts/${enc(rolloutId)}/attempts`, { worker_id: workerId }, { retry: 'unsent' });
  }

  queryRollouts(query: RolloutQuery = {}): Promise<PaginatedResult<Rollout | AttemptedRollout>> {
    return this.post('/rollouts/search', query);
  }

  getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null> {
    return this.get(`/rollouts/${enc(rolloutId)}`);
  }

  queryAttempts(rolloutId: string, query: Pagination = {}): Promise<PaginatedResult<Attempt>> {
    return this.post(`/rollouts/${enc(rolloutId)}/attempts/search`, query);
  }

  getLatestAttempt(rolloutId: string): Promise<Attempt | null> {
    return this.get(`/rollouts/${enc(rolloutId)}/attempts/latest`);
  }

  updateRollout(rolloutId: string, update: RolloutUpdate): Promise<Rollout> {
    return this.post(`/rollouts/${enc(rolloutId)}`, update);
  }

  updateAttempt(rolloutId: string, attemptId: string, update: AttemptUpdate): Promise<Attempt> {
    return this.post(`/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}`, update);
  }

  async waitForRollouts(rolloutIds: string[], timeoutSeconds: number | null): Promise<Rollout[]> {
    const deadline = timeoutSeconds === null ? Infinity : Date.now() + Math.max(0, timeoutSeconds) * 1000;
    for (;;) {
      const wait = Math.min(LONG_POLL_SECONDS, Math.max(0, (deadline - Date.now()) / 1000));
      const finished = await this.post<Rollout[]>(
        '/waits/rollouts',
        { rollout_ids: rolloutIds, timeout: wait },
        { timeoutSeconds: wait + this.timeout },
      );
      if (Date.now() >= deadline || finished.length === (await this.knownCount(rolloutIds, finished))) return finished;
    }
  }

  addResources(resources: NamedResources): Promise<ResourcesUpdate> {
    return this.post('/resources', resources, { retry: 'unsent' });
  }

  updateResources(resourcesId: string, resources: NamedResources): Promise<ResourcesUpdate> {
    return this.post(`/resources/${enc(resourcesId)}`, resources, { retry: 'unsent' });
  }

  getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null> {
    return this.get(`/resources/${enc(resourcesId)}`);
  }

  getLatestResources(): Promise<ResourcesUpdate | null> {
    return this.get('/resources/latest');
  }

  queryResources(query: ResourcesQuery = {}): Promise<PaginatedResult<ResourcesUpdate>> {
    return this.get(`/resources${queryString(query)}`);
  }

  async getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number> {
    return (await this.post<{ sequence_id: number }>('/spans/next', { rollout_id: rolloutId, attempt_id: attemptId }))
      .sequence_id;
  }

  addSpan(span: Span): Promise<Span | null> {
    return this.post('/spans', span);
  }

  addManySpans(spans: Span[]): Promise<Span[]> {
    return addSpansInOrder(this, spans);
  }

  querySpans(query: SpanQuery): Promise<PaginatedResult<Span>> {
    return this.post('/spans/search', query);
  }

  queryWorkers(query: WorkerQuery = {}): Promise<PaginatedResult<Worker>> {
    return this.post('/workers/search', query);
  }

  getWorkerById(workerId: string): Promise<Worker | null> {
    return this.get(`/workers/${enc(workerId)}`);
  }

  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker> {
    return this.post(
      `/workers/${enc(workerId)}`,
      heartbeatStats === undefined ? {} : { heartbeat_stats: heartbeatStats },
    );
  }

  statistics(): Promise<StoreStatistics> {
    return this.get('/statistics');
  }

  private get timeout(): number {
    return this.options.timeoutSeconds ?? 30;
  }

  /** Rollouts of `ids` the server knows: a wait is over when all of them finished. */
  private async knownCount(ids: string[], finished: Rollout[]): Promise<number> {
    if (finished.length === ids.length) return finished.length;
    const page = await this.queryRollouts({ rollout_id_in: ids });
    return page.total;
  }

  private get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path, undefined, {});
  }

  private post<T>(path: string, body: unknown, options: RequestOptions = {}): Promise<T> {
    return this.request<T>('POST', path, body, options);
  }

  private async request<T>(
    method: string,
    path: string,
    body: unknown,
    { retry = true, timeoutSeconds = this.timeout }: RequestOptions,
  ): Promise<T> {
    const delays = retry ? (this.options.retryDelaysSeconds ?? [1, 2, 5]) : [];
    for (let attempt = 0; ; attempt++) {
      let response: HttpAnswer;
      try {
        const headers: Record<string, string> = {
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...(this.options.token ? { authorization: `Bearer ${this.options.token}` } : {}),
        };
        response = await httpRequest(
          `${this.base}${path}`,
          method,
          headers,
          body === undefined ? undefined : JSON.stringify(body),
          timeoutSeconds * 1000,
        );
      } catch (error) {
        // The server did not answer (down, restarting): retry after a pause, then give up. A call
        // that creates something is retried only when it never reached the server: an answer
        // lost after the server acted would otherwise create it twice.
        const unsent = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
        if (attempt >= delays.length || (retry === 'unsent' && !unsent)) {
          throw new StoreUnreachableError(
            `agl store at ${this.base} did not answer ${method} ${path}: ${(error as Error).message}`,
            undefined,
            { cause: error },
          );
        }
        await new Promise((resolve) => setTimeout(resolve, delays[attempt] * 1000));
        continue;
      }
      const text = response.body;
      if (response.status >= 200 && response.status < 300) return (text === '' ? null : JSON.parse(text)) as T;
      const detail = detailOf(text);
      if (response.status === 404) throw new NotFoundError(detail);
      if (response.status === 400) throw new InvalidQueryError(detail);
      if ((response.status === 503 || response.status === 429) && attempt < delays.length) {
        await new Promise((resolve) =>
          setTimeout(resolve, Number(response.headers['retry-after'] ?? delays[attempt]) * 1000),
        );
        continue;
      }
      const message = `agl store answered ${response.status} to ${method} ${path}: ${detail}`;
      if (UNAVAILABLE_STATUSES.has(response.status)) throw new StoreUnreachableError(message, response.status);
      throw new StoreAnswerError(message, response.status);
    }
  }
}

const enc = encodeURIComponent;

function detailOf(text: string): string {
  try {
    const detail = (JSON.parse(text) as { detail?: unknown }).detail;
    return typeof detail === 'string' ? detail : JSON.stringify(detail ?? text);
  } catch {
    return text;
  }
}

function queryString(query: object): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query))
    if (value !== undefined && value !== null) params.append(key, String(value));
  const text = params.toString();
  return text ? `?${text}` : '';
}
