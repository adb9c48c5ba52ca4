import * as z from 'zod';
import {
  emptyObject,
  jsonObject,
  listOf,
  mustBe,
  notNull,
  numberIn,
  optional,
  orElse,
  requiredText,
} from './schema-fields.js';
import { ATTEMPT_STATUSES, ROLLOUT_MODES, ROLLOUT_STATUSES, WORKER_STATUSES } from './statuses.js';

/**
 * The request bodies and query parameters of the LightningStore REST API (Agent Lightning v0.x's),
 * one schema each. The server checks requests with them, and the request types of types.ts are
 * what they make (`z.infer`), so the checks and the types cannot drift apart. A field that may
 * be absent may also be null, which means the same unless the schema says otherwise (updates:
 * null clears a field, or is refused where it cannot be cleared).
 */

// ---- rollouts and attempts

/** Seconds of a timeout: null for none. */
const seconds = numberIn({ min: 0 }).nullish();

/** A rollout's config as a request gives it; the store fills in what is absent (see RolloutConfig). */
export const rolloutConfigRequest = z.object({
  timeout_seconds: seconds,
  unresponsive_seconds: seconds,
  max_attempts: numberIn({ integer: true, min: 1 }).nullish(),
  retry_condition: listOf(z.enum(ATTEMPT_STATUSES)),
});

/**
 * A client-chosen id of a rollout or attempt: it goes into URL paths (Agent Lightning v1's proxy
 * and event routes), so no slashes, spaces or control characters.
 */
export const clientId = z
  .string()
  .regex(/^[^\s/\\?#%\p{Cc}]{1,200}$/u, { error: mustBe('1 to 200 characters without spaces, /, \\, ?, # or %') });

/** One rollout to enqueue or start; every field but `input` may be absent. */
export const rolloutRequest = z.object({
  input: z.unknown(),
  /** agl's own: enqueuing an id that exists answers that rollout, unchanged (a retry is safe). */
  rollout_id: clientId.nullish(),
  mode: z.enum(ROLLOUT_MODES).nullish(),
  resources_id: z.string().nullish(),
  config: rolloutConfigRequest.nullish(),
  metadata: jsonObject.nullish(),
});

/** POST /queues/rollouts/enqueue */
export const enqueueBody = z.object({ rollouts: z.array(rolloutRequest) });

/** POST /queues/rollouts/dequeue; the server caps wait_seconds. */
export const dequeueBody = z.object({
  limit: optional(numberIn({ integer: true })),
  worker_id: z.string().nullish(),
  wait_seconds: optional(numberIn({ min: 0 })),
});

/** POST /rollouts: start one rollout now, without the queue. */
export const startRolloutBody = rolloutRequest.extend({ worker_id: z.string().nullish() });

/** POST /rollouts/{id}: an absent field is left as it is, null clears it (status and config cannot be cleared). */
export const rolloutUpdate = z.object({
  input: z.unknown().optional(),
  mode: z.enum(ROLLOUT_MODES).nullish(),
  resources_id: z.string().nullish(),
  status: notNull(z.enum(ROLLOUT_STATUSES)),
  config: notNull(rolloutConfigRequest),
  metadata: jsonObject.nullish(),
});

/** POST /waits/rollouts; the server caps the timeout. */
export const waitBody = z.object({ rollout_ids: z.array(z.string()), timeout: optional(numberIn({ min: 0 })) });

/** POST /rollouts/{id}/attempts */
export const startAttemptBody = z.object({
  worker_id: z.string().nullish(),
  /** agl's own: the new attempt's id (Agent Lightning v1 names its attempts); one the rollout has is a 409. */
  attempt_id: clientId.nullish(),
});

/** POST /rollouts/{id}/attempts/{attempt_id}: an absent field is left as it is; none can be cleared. */
export const attemptUpdate = z.object({
  status: notNull(z.enum(ATTEMPT_STATUSES)),
  worker_id: notNull(z.string()),
  last_heartbeat_time: notNull(numberIn({ min: 0 })),
  metadata: notNull(jsonObject),
});

// ---- queries: GET parameters, or the body of the POST .../search twin

/** Paging and sorting of every list; the store checks the values against what it can do. */
export const pagination = z.object({
  limit: optional(numberIn({ integer: true })),
  offset: optional(numberIn({ integer: true })),
  sort_by: z.string().nullish(),
  sort_order: optional(z.enum(['asc', 'desc'])),
});

const filterLogic = optional(z.enum(['and', 'or']));

export const rolloutQuery = pagination.extend({
  status_in: listOf(z.enum(ROLLOUT_STATUSES)),
  rollout_id_in: listOf(z.string()),
  rollout_id_contains: optional(z.string()),
  /** agl's own: rollouts of these modes. */
  mode_in: listOf(z.enum(ROLLOUT_MODES)),
  /** agl's own: rollouts whose input, as JSON text, contains this text. */
  input_contains: optional(z.string()),
  filter_logic: filterLogic,
});

export const workerQuery = pagination.extend({
  status_in: listOf(z.enum(WORKER_STATUSES)),
  worker_id_contains: optional(z.string()),
  filter_logic: filterLogic,
});

export const resourcesQuery = pagination.extend({
  resources_id: optional(z.string()),
  resources_id_contains: optional(z.string()),
});

const filter = optional(z.string());

export const spanQuery = pagination.extend({
  rollout_id: requiredText,
  /** An attempt id, "latest", or absent for every attempt. */
  attempt_id: z.string().nullish(),
  trace_id: filter,
  trace_id_contains: filter,
  span_id: filter,
  span_id_contains: filter,
  parent_id: filter,
  parent_id_contains: filter,
  name: filter,
  name_contains: filter,
  filter_logic: filterLogic,
});

// ---- resources and workers

export const llmResource = z.looseObject({
  resource_type: z.enum(['llm', 'proxy_llm']),
  endpoint: z.string(),
  model: z.string(),
  api_key: orElse(z.string(), () => null),
  sampling_parameters: orElse(jsonObject, emptyObject),
});

export const promptTemplateResource = z.looseObject({
  resource_type: z.literal('prompt_template'),
  template: z.string(),
  engine: z.enum(['jinja', 'f-string', 'poml']),
});

/** POST /resources and /resources/{id}: the named resources object itself. */
export const namedResources = z.record(
  z.string(),
  z.discriminatedUnion('resource_type', [llmResource, promptTemplateResource]),
);

/** POST /workers/{id} */
export const workerUpdate = z.object({ heartbeat_stats: notNull(jsonObject) });

// ---- spans

/** The latest time a span may have: TIMESTAMP_NS (int64 nanoseconds) ends in 2262. */
const MAX_SPAN_SECONDS = 9_223_372_036;
/** A time in float seconds since the epoch, or null. */
const spanTime = orElse(numberIn({ min: 0, max: MAX_SPAN_SECONDS }), () => null);
const hexId = (digits: 16 | 32) =>
  z.string().regex(new RegExp(`^[0-9a-f]{${digits}}$`), { error: mustBe(`lowercase hex of ${digits} digits`) });

export const spanContext = z.object({
  trace_id: z.string(),
  span_id: z.string(),
  is_remote: orElse(z.boolean(), () => false),
  trace_state: orElse(z.record(z.string(), z.string()), (): Record<string, string> => ({})),
});

const spanEvent = z.object({
  name: z.string(),
  attributes: orElse(jsonObject, emptyObject),
  timestamp: spanTime,
});

const spanLink = z.object({ context: spanContext, attributes: orElse(jsonObject, () => null) });

/** POST /spans: Agent Lightning's Span; without sequence_id, the rollout's next one is given. */
export const spanBody = z.object({
  rollout_id: z.string(),
  attempt_id: z.string(),
  // Any integer, as Agent Lightning's Span model takes (its counter keeps the highest).
  sequence_id: optional(numberIn({ integer: true })),
  trace_id: hexId(32),
  span_id: hexId(16),
  parent_id: orElse(hexId(16), () => null),
  name: z.string(),
  status: orElse(
    z.object({
      status_code: z.enum(['UNSET', 'OK', 'ERROR']).default('UNSET'),
      description: orElse(z.string(), () => null),
    }),
    () => ({ status_code: 'UNSET' as const, description: null }),
  ),
  attributes: orElse(jsonObject, emptyObject),
  events: orElse(z.array(spanEvent), () => []),
  links: orElse(z.array(spanLink), () => []),
  start_time: spanTime,
  end_time: spanTime,
  context: orElse(spanContext, () => null),
  parent: orElse(spanContext, () => null),
  resource: orElse(
    z.object({ attributes: orElse(jsonObject, emptyObject), schema_url: orElse(z.string(), () => '') }),
    () => ({ attributes: emptyObject(), schema_url: '' }),
  ),
});

/** POST /spans/next */
export const nextSequenceBody = z.object({ rollout_id: requiredText, attempt_id: requiredText });

// ---- training batches (GRPO's hand-off to the trainer, docs/training.md)

/** GET /training/batches/next: how long to wait for a batch, in seconds. */
export const trainingNextQuery = z.object({ wait: optional(numberIn({ min: 0, max: 300 })) });

/** A model version's name: printable ASCII without spaces (it travels in HTTP headers), at most 128 characters. */
export const modelVersion = z
  .string()
  .regex(/^[\x21-\x7e]{1,128}$/, { error: mustBe('1 to 128 printable ASCII characters without spaces') });

/** The model a trainer made: it becomes the `llm` resource the next rollouts run with. */
const trainedModel = z.object({
  endpoint: requiredText,
  model: requiredText,
  /** Default: the count of versions so far ("1" after the starting "0"). */
  version: optional(modelVersion),
});

/** POST /training/batches/{batch_id}/done, and the trainer's done file. */
export const trainingDoneBody = z.object({
  metrics: orElse(
    z.record(z.string(), z.number({ error: mustBe('a finite number') })),
    (): Record<string, number> => ({}),
  ),
  model: optional(trainedModel),
});

/** GET of one thing by its id, and /statistics: no parameters (others are ignored). */
export const noParameters = z.object({});
