import type * as z from 'zod';
import type * as requests from './requests.js';
import type { AttemptStatus, RolloutMode, RolloutStatus, WorkerStatus } from './statuses.js';

/**
 * The wire types of the LightningStore, shared by every folder. JSON field names are snake_case
 * and times are float seconds since the epoch, as in Agent Lightning v0.x, so that its clients
 * and ours are interchangeable. What a request takes is what its schema makes (requests.ts);
 * answers are the interfaces here. Only types come from requests.ts: importing this module does
 * not load zod.
 */

// The status lists live in statuses.ts, so that requests.ts builds its schemas from them
// without importing this module (which imports requests.ts' types).
export * from './statuses.js';

export interface RolloutConfig {
  timeout_seconds: number | null;
  unresponsive_seconds: number | null;
  /** Attempts in all, the first included (at least 1). */
  max_attempts: number;
  /** Attempt statuses that requeue the rollout while attempts remain. */
  retry_condition: AttemptStatus[];
}

export interface Rollout {
  rollout_id: string;
  input: unknown;
  start_time: number;
  end_time: number | null;
  mode: RolloutMode | null;
  resources_id: string | null;
  status: RolloutStatus;
  config: RolloutConfig;
  metadata: Record<string, unknown> | null;
}

export interface Attempt {
  rollout_id: string;
  attempt_id: string;
  /** 1 for a rollout's first attempt. */
  sequence_id: number;
  start_time: number;
  end_time: number | null;
  status: AttemptStatus;
  worker_id: string | null;
  last_heartbeat_time: number | null;
  metadata: Record<string, unknown> | null;
}

/** A rollout with its latest attempt. */
export interface AttemptedRollout extends Rollout {
  attempt: Attempt;
}

/** A rollout's config as a request gives it: absent or null fields take the defaults of RolloutConfig. */
export type RolloutConfigRequest = z.infer<typeof requests.rolloutConfigRequest>;

export type LlmResource = z.infer<typeof requests.llmResource>;
export type PromptTemplateResource = z.infer<typeof requests.promptTemplateResource>;
export type Resource = LlmResource | PromptTemplateResource;
export type NamedResources = z.infer<typeof requests.namedResources>;

export interface ResourcesUpdate {
  resources_id: string;
  version: number;
  create_time: number;
  update_time: number;
  resources: NamedResources;
}

export interface Worker {
  worker_id: string;
  status: WorkerStatus;
  heartbeat_stats: Record<string, unknown> | null;
  last_heartbeat_time: number | null;
  last_dequeue_time: number | null;
  last_busy_time: number | null;
  last_idle_time: number | null;
  current_rollout_id: string | null;
  current_attempt_id: string | null;
}

export interface PaginatedResult<T> {
  items: T[];
  /** -1 when there is no limit. */
  limit: number;
  offset: number;
  /** Items that matched before limit and offset. */
  total: number;
}

export type Pagination = z.infer<typeof requests.pagination>;
export type RolloutQuery = z.infer<typeof requests.rolloutQuery>;
export type WorkerQuery = z.infer<typeof requests.workerQuery>;
export type ResourcesQuery = z.infer<typeof requests.resourcesQuery>;
export type SpanQuery = z.infer<typeof requests.spanQuery>;

/** What enqueueRollout and startRollout take. */
export type RolloutRequest = z.infer<typeof requests.rolloutRequest>;
/** Fields of a rollout update; an absent field is left as it is, null clears it. */
export type RolloutUpdate = z.infer<typeof requests.rolloutUpdate>;
export type AttemptUpdate = z.infer<typeof requests.attemptUpdate>;

export type SpanContext = z.infer<typeof requests.spanContext>;
/** A span as POST /spans takes it: sequence_id may be absent. */
type SpanBody = z.infer<typeof requests.spanBody>;
/** A span as the REST API answers it, and as stores take it (Agent Lightning's Span model). */
export type Span = Omit<SpanBody, 'sequence_id'> & { sequence_id: number };
