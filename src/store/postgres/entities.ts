import type { Attempt, Rollout } from '../../api/types.js';
import { defaultConfig } from '../rollout-state.js';

// Entities as rows of the agl schema and back. Each SELECT list names the columns in the
// entity's field order, so that a row read (node-postgres parses json and float8 columns) is the
// entity as the REST API answers it; rollouts carry their latest attempt's id besides.

export const ROLLOUT_COLUMNS =
  'rollout_id, input, start_time, end_time, mode, resources_id, status, config, metadata, latest_attempt_id';
export const ATTEMPT_COLUMNS =
  'rollout_id, attempt_id, sequence_id, start_time, end_time, status, worker_id, last_heartbeat_time, metadata';
export const RESOURCES_COLUMNS = 'resources_id, version, create_time, update_time, resources';
export const WORKER_COLUMNS =
  'worker_id, status, heartbeat_stats, last_heartbeat_time, last_dequeue_time, last_busy_time, last_idle_time, current_rollout_id, current_attempt_id';

export type RolloutRow = Rollout & { latest_attempt_id: string | null };

export function rolloutOf(row: RolloutRow): Rollout {
  const { latest_attempt_id: _, ...rollout } = row;
  return { ...rollout, config: defaultConfig(rollout.config) };
}

/** A JSON column's parameter: the value's JSON text (undefined, as JSON.stringify gives for it, is null). */
export const json = (value: unknown): string => JSON.stringify(value ?? null);

/** The log key of an entity, as the embedded store's state_history has it. */
export const attemptKey = (a: Pick<Attempt, 'rollout_id' | 'attempt_id'>): string => `${a.rollout_id}/${a.attempt_id}`;
