import type {
  Attempt,
  AttemptedRollout,
  AttemptUpdate,
  NamedResources,
  PaginatedResult,
  Pagination,
  ResourcesQuery,
  ResourcesUpdate,
  Rollout,
  RolloutQuery,
  RolloutRequest,
  RolloutUpdate,
  Span,
  SpanQuery,
  Worker,
  WorkerQuery,
} from './types.js';

export type { ResourcesQuery, RolloutQuery, WorkerQuery } from './types.js';

export interface StoreStatistics {
  name: string;
  total_rollouts: number;
  total_attempts: number;
  total_spans: number;
  total_resources: number;
  total_workers: number;
  uptime: number;
}

/** A dequeue's worker, and how long it waits for a rollout when none is queued. */
export interface DequeueOptions {
  workerId?: string | null;
  waitSeconds?: number;
  /**
   * Ends the wait early, with nothing taken, once it aborts (a runner that stops). The stores in
   * this process honour it; the HTTP client waits its wait out, since a request cut off might
   * still have taken a rollout on the server.
   */
  signal?: AbortSignal;
}

/**
 * The hub algorithms and runners meet at (Agent Lightning's LightningStore). Three implement it:
 * the server's store with its state in the DuckDB file (store/lightning.ts), the one with its
 * state in PostgreSQL (store/postgres/lightning.ts), and the HTTP client (client/store-client.ts),
 * so code runs unchanged against any of them. Every change resolves once it is durable.
 */
export interface LightningStore {
  enqueueRollout(request: RolloutRequest): Promise<Rollout>;
  enqueueManyRollouts(requests: RolloutRequest[]): Promise<Rollout[]>;
  dequeueRollout(options?: DequeueOptions): Promise<AttemptedRollout | null>;
  dequeueManyRollouts(options?: DequeueOptions & { limit?: number }): Promise<AttemptedRollout[]>;
  startRollout(request: RolloutRequest & { worker_id?: string | null }): Promise<AttemptedRollout>;
  /** A new attempt of the rollout (named `attemptId` when given: one it has already is a ConflictError). */
  startAttempt(rolloutId: string, workerId?: string | null, attemptId?: string | null): Promise<AttemptedRollout>;
  queryRollouts(query?: RolloutQuery): Promise<PaginatedResult<Rollout | AttemptedRollout>>;
  getRolloutById(rolloutId: string): Promise<Rollout | AttemptedRollout | null>;
  queryAttempts(rolloutId: string, query?: Pagination): Promise<PaginatedResult<Attempt>>;
  getLatestAttempt(rolloutId: string): Promise<Attempt | null>;
  updateRollout(rolloutId: string, update: RolloutUpdate): Promise<Rollout>;
  updateAttempt(rolloutId: string, attemptId: string | 'latest', update: AttemptUpdate): Promise<Attempt>;
  waitForRollouts(rolloutIds: string[], timeoutSeconds: number | null): Promise<Rollout[]>;
  addResources(resources: NamedResources): Promise<ResourcesUpdate>;
  updateResources(resourcesId: string, resources: NamedResources): Promise<ResourcesUpdate>;
  getResourcesById(resourcesId: string): Promise<ResourcesUpdate | null>;
  getLatestResources(): Promise<ResourcesUpdate | null>;
  queryResources(query?: ResourcesQuery): Promise<PaginatedResult<ResourcesUpdate>>;
  getNextSpanSequenceId(rolloutId: string, attemptId: string): Promise<number>;
  /** Stores a span of a known rollout and attempt; null when an identical span is stored already. */
  addSpan(span: Span): Promise<Span | null>;
  /** Stores spans; answers the ones that were new. */
  addManySpans(spans: Span[]): Promise<Span[]>;
  querySpans(query: SpanQuery): Promise<PaginatedResult<Span>>;
  queryWorkers(query?: WorkerQuery): Promise<PaginatedResult<Worker>>;
  getWorkerById(workerId: string): Promise<Worker | null>;
  updateWorker(workerId: string, heartbeatStats?: Record<string, unknown>): Promise<Worker>;
  statistics(): Promise<StoreStatistics>;
}

// The rules every implementation shares, written once: each supplies the call they stand on.

/** dequeueRollout: a dequeue of at most one rollout. */
export async function dequeueOne(
  store: Pick<LightningStore, 'dequeueManyRollouts'>,
  options: DequeueOptions,
): Promise<AttemptedRollout | null> {
  return (await store.dequeueManyRollouts({ ...options, limit: 1 }))[0] ?? null;
}

/** addManySpans: one span after another, the new ones answered. */
export async function addSpansInOrder(store: Pick<LightningStore, 'addSpan'>, spans: Span[]): Promise<Span[]> {
  const added: Span[] = [];
  for (const span of spans) {
    const result = await store.addSpan(span);
    if (result) added.push(result);
  }
  return added;
}
