import {
  addSpansInOrder,
  dequeueOne,
  type LightningStore,
  type ResourcesQuery,
  type RolloutQuery,
  type StoreStatistics,
  type WorkerQuery,
} from '../api/lightning-store.js';
import type { FeedbackReceipt, FeedbackRequest } from '../api/feedback.js';
import { httpRequest } from './http-request.js';
import { RETRY_DELAYS_SECONDS, storeHeaders, storeRequest } from './store-request.js';
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
  /** Retry a refused connection too (default true; ONE_SHOT_RETRY in store-request.ts says false). */
  readonly retryRefused?: boolean;
}

interface RequestOptions {
  /** Which failures are sent again (StoreCall in store-request.ts); default: all. */
  readonly retry?: boolean | 'unsent';
  readonly timeoutSeconds?: number;
}

/** The server's own cap on one long poll; longer waits are several requests. */
const LONG_POLL_SECONDS = 60;

/**
 * The LightningStore of a remote `agl serve` (or any Agent Lightning v0.x store server), over
 * its REST API. Errors come back as the embedded store raises them: NotFoundError for unknown
 * ids, InvalidQueryError for requests the server refused as bad; StoreUnreachableError when
 * the store is away, StoreAnswerError for its other error answers (store-request.ts).
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

  startAttempt(
    rolloutId: string,
    workerId: string | null = null,
    attemptId?: string | null,
  ): Promise<AttemptedRollout> {
    const body = attemptId ? { worker_id: workerId, attempt_id: attemptId } : { worker_id: workerId };
    return this.post(`/rollouts/${enc(rolloutId)}/attempts`, body, { retry: 'unsent' });
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

  /**
   * Gives a stored call, trace or rollout a reward after the fact (POST /v1/agl/feedback). Sent
   * again on failure only with a `feedback_id`, which makes a repeat harmless.
   */
  sendFeedback(feedback: FeedbackRequest): Promise<FeedbackReceipt> {
    return this.post('/feedback', feedback, { retry: feedback.feedback_id ? true : 'unsent' });
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
    const text = body === undefined ? undefined : JSON.stringify(body);
    const answer = await storeRequest({
      base: this.base,
      method,
      path,
      retry,
      delaysSeconds: this.options.retryDelaysSeconds ?? RETRY_DELAYS_SECONDS,
      retryRefused: this.options.retryRefused,
      send: () =>
        httpRequest(
          `${this.base}${path}`,
          method,
          storeHeaders(this.options.token, text !== undefined),
          text,
          timeoutSeconds * 1000,
        ),
      text: (error) => error.body,
    });
    return (answer.body === '' ? null : JSON.parse(answer.body)) as T;
  }
}

const enc = encodeURIComponent;

function queryString(query: object): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query))
    if (value !== undefined && value !== null) params.append(key, String(value));
  const text = params.toString();
  return text ? `?${text}` : '';
}
