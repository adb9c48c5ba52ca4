import * as z from 'zod';
import { clientId } from '../../api/requests.js';
import { jsonObject, mustBe, numberIn } from '../../api/schema-fields.js';
import type { Attempt, Rollout, RolloutRequest, RolloutStatus } from '../../api/types.js';

/**
 * Agent Lightning v1's rollouts as agl's: a v1 rollout is an agl rollout, its attempt an agl
 * attempt, and what v1 keeps that agl has no field for lives in the rollout's metadata under
 * `agl_v1` (hidden from v1's clients). The mapping is written down in docs/agent-lightning-v1.md.
 */

export const V1_STATES = ['queuing', 'running', 'succeeded', 'failed'] as const;
export type V1State = (typeof V1_STATES)[number];

/** v1's VALID_TRANSITIONS: a controller moves a rollout forward only. */
export const V1_TRANSITIONS: Readonly<Record<V1State, readonly V1State[]>> = {
  queuing: ['running', 'failed'],
  running: ['succeeded', 'failed'],
  succeeded: [],
  failed: [],
};

/** The agl statuses each v1 state covers: an agl runner's own steps read as v1 states too. */
export const AGL_STATUSES_OF: Readonly<Record<V1State, readonly RolloutStatus[]>> = {
  queuing: ['queuing', 'requeuing'],
  running: ['preparing', 'running'],
  succeeded: ['succeeded'],
  failed: ['failed', 'cancelled'],
};

export function v1StateOf(status: RolloutStatus): V1State {
  return V1_STATES.find((state) => AGL_STATUSES_OF[state].includes(status)) as V1State;
}

/** v1's attempt id when its controller names none (its DEFAULT_ATTEMPT_ID). */
export const DEFAULT_ATTEMPT_ID = '0';

/** The metadata key of what v1 keeps beside an agl rollout. */
export const V1_METADATA_KEY = 'agl_v1';

const localConfig = z.object({
  agent_class: z.string().nullish().default(null),
  env_map: z.record(z.string(), z.string()).default({}),
});
const k8sConfig = z.object({ job_template: z.string().nullish().default(null) });

/** v1's RolloutConfig: the controller's, except the timeout, which agl's watchdog keeps too. */
const v1Config = z.object({
  timeout_seconds: numberIn({ integer: true, min: 1 }).default(3600),
  local: localConfig.nullish().default(null),
  k8s: k8sConfig.nullish().default(null),
});
export type V1Config = z.output<typeof v1Config>;
const DEFAULT_CONFIG: V1Config = { timeout_seconds: 3600, local: null, k8s: null };

/** v1's RolloutMetadata: the batch's place, and whatever else the trainer adds. */
const v1Metadata = z
  .looseObject({
    batch_idx: numberIn({ integer: true }).nullish(),
    sample_idx_in_batch: numberIn({ integer: true }).nullish(),
  })
  .refine((metadata) => !(V1_METADATA_KEY in metadata), { error: `must not hold the key ${V1_METADATA_KEY} (agl's)` });

/** POST /api/rollouts: a list of v1's RolloutCreate. */
export const rolloutCreates = z.array(
  z.object({
    input: z.unknown().refine((input) => input !== undefined, { error: 'is required' }),
    is_train: z.boolean().default(true),
    config: v1Config.nullish(),
    metadata: v1Metadata.nullish(),
    rollout_id: clientId.nullish(),
  }),
);
export type V1RolloutCreate = z.output<typeof rolloutCreates>[number];

/** PATCH /api/rollouts/{id}: v1's RolloutPatch; its status takes no other field (FastAPI's 422). */
export const rolloutPatch = z.object({
  status: z
    .strictObject(
      {
        state: z.enum(V1_STATES).optional(),
        k8s_job_name: z.string().nullish(),
        last_attempt_id: clientId.nullish(),
        error_message: z.string().nullish(),
      },
      {
        error: (issue) =>
          issue.code === 'unrecognized_keys'
            ? `takes state, k8s_job_name, last_attempt_id and error_message only, not ${issue.keys.join(', ')}`
            : undefined,
      },
    )
    .nullish(),
});
export type V1StatusPatch = NonNullable<z.output<typeof rolloutPatch>['status']>;

/** What v1 keeps of a rollout that agl has no field for. */
export interface V1Bookkeeping {
  config: V1Config;
  k8s_job_name: string | null;
  last_attempt_id: string | null;
  error_message: string | null;
  version: number;
  updated_at: number;
  /** DELETE /api/rollouts/{id}: gone from v1's API, kept in agl's store (docs/agent-lightning-v1.md). */
  deleted?: true;
}

/** The bookkeeping of a rollout; a rollout made through agl's own API gets v1's defaults. */
export function bookkeepingOf(rollout: Rollout): V1Bookkeeping {
  const kept = rollout.metadata?.[V1_METADATA_KEY];
  if (kept !== null && typeof kept === 'object') return kept as V1Bookkeeping;
  return {
    config: { ...DEFAULT_CONFIG, timeout_seconds: rollout.config.timeout_seconds ?? DEFAULT_CONFIG.timeout_seconds },
    k8s_job_name: null,
    last_attempt_id: null,
    error_message: null,
    version: 1,
    updated_at: 0,
  };
}

export const isDeleted = (rollout: Rollout) => bookkeepingOf(rollout).deleted === true;

/** The agl rollout a v1 RolloutCreate enqueues: one attempt, timed out as v1's controller would. */
export function rolloutRequestOf(create: V1RolloutCreate): RolloutRequest {
  const config = create.config ?? DEFAULT_CONFIG;
  // updated_at 0: the rollout's creation time stands (the store sets it), until a PATCH.
  const bookkeeping: V1Bookkeeping = {
    config,
    k8s_job_name: null,
    last_attempt_id: null,
    error_message: null,
    version: 1,
    updated_at: 0,
  };
  return {
    input: create.input,
    rollout_id: create.rollout_id,
    mode: create.is_train ? 'train' : 'val',
    config: { timeout_seconds: config.timeout_seconds, max_attempts: 1 },
    metadata: { ...create.metadata, [V1_METADATA_KEY]: bookkeeping },
  };
}

/** The metadata that records `bookkeeping` on `rollout`, the rest left as it is. */
export const metadataWith = (rollout: Rollout, bookkeeping: V1Bookkeeping) => ({
  ...rollout.metadata,
  [V1_METADATA_KEY]: bookkeeping,
});

/** v1's Rollout, as its clients read it. */
export function v1RolloutOf(rollout: Rollout, latest: Attempt | null = null) {
  const { [V1_METADATA_KEY]: _, ...metadata } = rollout.metadata ?? {};
  const kept = bookkeepingOf(rollout);
  // agl's watchdog ends an attempt past its timeout: say so where v1 puts why a rollout failed.
  const timedOut = latest?.status === 'timeout' && rollout.status === 'failed';
  return {
    rollout_id: rollout.rollout_id,
    input: rollout.input,
    is_train: rollout.mode !== 'val' && rollout.mode !== 'test',
    config: kept.config,
    metadata: { batch_idx: null, sample_idx_in_batch: null, ...metadata },
    status: {
      state: v1StateOf(rollout.status),
      k8s_job_name: kept.k8s_job_name,
      last_attempt_id: kept.last_attempt_id,
      error_message:
        kept.error_message ?? (timedOut ? `attempt timed out after ${kept.config.timeout_seconds} s (agl)` : null),
      version: kept.version,
      created_at: rollout.start_time,
      // A step agl took itself (an agl runner, the watchdog) moves the time on, not the version.
      updated_at: Math.max(kept.updated_at, rollout.start_time, rollout.end_time ?? 0, latest?.start_time ?? 0),
    },
  };
}
export type V1Rollout = ReturnType<typeof v1RolloutOf>;

/** POST /api/rollouts/{id}/attempt/{aid}/events: v1's EventCreate. */
export const eventCreate = z.object({
  event_type: z
    .string()
    .min(1, { error: () => 'is required' })
    .max(200),
  data: jsonObject.nullish().transform((data) => data ?? {}),
});

/** A v1 reward's value must be a number: it becomes a row of `rewards`. */
export const rewardValue = z.number({ error: mustBe('a number') });
