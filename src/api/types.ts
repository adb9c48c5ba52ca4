/**
 * The wire types of the LightningStore, shared by every folder. JSON field names are snake_case
 * and times are float seconds since the epoch, as in Agent Lightning v0.x, so that its clients
 * and ours are interchangeable.
 */

export const ROLLOUT_STATUSES = ['queuing', 'preparing', 'running', 'succeeded', 'failed', 'cancelled', 'requeuing'] as const;
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number];

export const ATTEMPT_STATUSES = ['preparing', 'running', 'succeeded', 'failed', 'cancelled', 'timeout', 'unresponsive'] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export const ROLLOUT_MODES = ['train', 'val', 'test'] as const;
export type RolloutMode = (typeof ROLLOUT_MODES)[number];

export const WORKER_STATUSES = ['idle', 'busy', 'unknown'] as const;
export type WorkerStatus = (typeof WORKER_STATUSES)[number];

/** Rollouts in these statuses are done: waitForRollouts returns them. */
export const FINISHED_ROLLOUT_STATUSES: readonly RolloutStatus[] = ['succeeded', 'failed', 'cancelled'];

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

export interface LlmResource {
  resource_type: 'llm' | 'proxy_llm';
  endpoint: string;
  model: string;
  api_key: string | null;
  sampling_parameters: Record<string, unknown>;
}

export interface PromptTemplateResource {
  resource_type: 'prompt_template';
  template: string;
  engine: 'jinja' | 'f-string' | 'poml';
}

export type Resource = LlmResource | PromptTemplateResource;
export type NamedResources = Record<string, Resource>;

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

export interface Pagination {
  limit?: number;
  offset?: number;
  sort_by?: string | null;
  sort_order?: 'asc' | 'desc';
}

/** What enqueueRollout and startRollout take. */
export interface RolloutRequest {
  input: unknown;
  mode?: RolloutMode | null;
  resources_id?: string | null;
  config?: Partial<RolloutConfig> | null;
  metadata?: Record<string, unknown> | null;
}

/** Fields of a rollout update; an absent field is left as it is, null clears it. */
export interface RolloutUpdate {
  input?: unknown;
  mode?: RolloutMode | null;
  resources_id?: string | null;
  status?: RolloutStatus;
  config?: Partial<RolloutConfig>;
  metadata?: Record<string, unknown> | null;
}

export interface AttemptUpdate {
  status?: AttemptStatus;
  worker_id?: string;
  last_heartbeat_time?: number;
  metadata?: Record<string, unknown>;
}

export interface SpanContext {
  trace_id: string;
  span_id: string;
  is_remote: boolean;
  trace_state: Record<string, string>;
}

/** A span as the REST API takes and answers it (Agent Lightning's Span model). */
export interface Span {
  rollout_id: string;
  attempt_id: string;
  sequence_id: number;
  trace_id: string;
  span_id: string;
  parent_id: string | null;
  name: string;
  status: { status_code: 'UNSET' | 'OK' | 'ERROR'; description: string | null };
  attributes: Record<string, unknown>;
  events: { name: string; attributes: Record<string, unknown>; timestamp: number | null }[];
  links: { context: SpanContext; attributes: Record<string, unknown> | null }[];
  start_time: number | null;
  end_time: number | null;
  context: SpanContext | null;
  parent: SpanContext | null;
  resource: { attributes: Record<string, unknown>; schema_url: string };
}

export interface SpanQuery extends Pagination {
  rollout_id: string;
  /** An attempt id, "latest", or absent for every attempt. */
  attempt_id?: string | null;
  trace_id?: string;
  trace_id_contains?: string;
  span_id?: string;
  span_id_contains?: string;
  parent_id?: string;
  parent_id_contains?: string;
  name?: string;
  name_contains?: string;
  filter_logic?: 'and' | 'or';
}
