import pg from 'pg';
import type { Attempt, ResourcesUpdate, Worker } from '../../api/types.js';
import {
  ATTEMPT_COLUMNS,
  RESOURCES_COLUMNS,
  ROLLOUT_COLUMNS,
  rolloutOf,
  WORKER_COLUMNS,
  type RolloutRow,
} from './entities.js';
import { LOCKS } from './locks.js';
import type { Loaded } from './state-rows.js';

/** What an operation locks and reads before it runs (all of it optional). */
export interface LoadSpec {
  /** Rollouts to lock (FOR UPDATE), by id; unknown ids are left out. */
  readonly rollouts?: readonly string[];
  /** Leave out the rollouts another transaction holds instead of waiting for them (the watchdog). */
  readonly skipLocked?: boolean;
  /** Lock up to this many rollouts from the front of the queue, skipping those another transaction holds. */
  readonly queue?: number;
  /** Workers to lock and read (those of the rollouts' attempts are locked and read too). */
  readonly workers?: readonly (string | null | undefined)[];
  /** A resources id to lock and read. */
  readonly resources?: string;
  /** Read the latest resources (new rollouts take their id). */
  readonly latestResources?: boolean;
  /** Take the watchdog's turn first (one round of all servers at a time). */
  readonly watchdog?: boolean;
}

/**
 * agl.lock_and_read: an operation's locks and reads in one round trip. Each statement of a
 * PL/pgSQL function takes a new snapshot, so what is read after a lock is what the lock holder
 * committed. Locks are taken in one order everywhere: the watchdog's turn, rollouts (in id or
 * queue order), workers (advisory locks, in id order, so that a worker not created yet cannot be
 * created twice), resources (advisory). The attempts of locked rollouts are theirs: every change
 * of an attempt holds its rollout's lock.
 */
export const LOCK_AND_READ_DDL = `CREATE FUNCTION agl.lock_and_read(
    p_rollouts text[] DEFAULT '{}', p_skip_locked boolean DEFAULT false, p_queue integer DEFAULT 0,
    p_workers text[] DEFAULT '{}', p_resources text DEFAULT NULL, p_latest_resources boolean DEFAULT false,
    p_watchdog boolean DEFAULT false)
  RETURNS json LANGUAGE plpgsql AS $fn$
DECLARE
  v_ids text[];
  v_workers text[];
  v_worker text;
BEGIN
  IF p_watchdog THEN PERFORM pg_advisory_xact_lock(${LOCKS.watchdog}, 0); END IF;
  IF p_queue > 0 THEN
    v_ids := ARRAY(SELECT r.rollout_id FROM agl.rollouts r WHERE r.queue_position IS NOT NULL
      ORDER BY r.queue_position LIMIT p_queue FOR UPDATE SKIP LOCKED);
  ELSIF p_skip_locked THEN
    v_ids := ARRAY(SELECT r.rollout_id FROM agl.rollouts r WHERE r.rollout_id = ANY(p_rollouts)
      ORDER BY r.rollout_id FOR UPDATE SKIP LOCKED);
  ELSE
    v_ids := ARRAY(SELECT r.rollout_id FROM agl.rollouts r WHERE r.rollout_id = ANY(p_rollouts)
      ORDER BY r.rollout_id FOR UPDATE);
  END IF;
  v_workers := ARRAY(SELECT DISTINCT u.id FROM (
      SELECT unnest(p_workers) AS id
      UNION SELECT a.worker_id FROM agl.attempts a WHERE a.rollout_id = ANY(v_ids) AND a.worker_id IS NOT NULL) u
    ORDER BY u.id);
  FOREACH v_worker IN ARRAY v_workers LOOP
    PERFORM pg_advisory_xact_lock(${LOCKS.worker}, hashtext(v_worker));
  END LOOP;
  IF p_resources IS NOT NULL THEN PERFORM pg_advisory_xact_lock(${LOCKS.resources}, hashtext(p_resources)); END IF;
  RETURN json_build_object(
    'rollouts', (SELECT coalesce(json_agg(r ORDER BY array_position(v_ids, r.rollout_id)), '[]')
      FROM (SELECT ${ROLLOUT_COLUMNS} FROM agl.rollouts WHERE rollout_id = ANY(v_ids)) r),
    'attempts', (SELECT coalesce(json_agg(a ORDER BY a.rollout_id, a.sequence_id), '[]')
      FROM (SELECT ${ATTEMPT_COLUMNS} FROM agl.attempts WHERE rollout_id = ANY(v_ids)) a),
    'workers', (SELECT coalesce(json_agg(w), '[]')
      FROM (SELECT ${WORKER_COLUMNS} FROM agl.workers WHERE worker_id = ANY(v_workers)) w),
    'resources', (SELECT coalesce(json_agg(s), '[]') FROM (
      SELECT ${RESOURCES_COLUMNS} FROM agl.resources
      WHERE resources_id = p_resources OR (p_latest_resources AND p_resources IS NULL)
      ORDER BY update_time DESC, created DESC LIMIT 1) s),
    'queue', CASE WHEN p_queue > 0 THEN to_json(v_ids) ELSE '[]' END);
END
$fn$`;

const text = (value: string) => pg.escapeLiteral(value);
const texts = (values: readonly string[]) =>
  values.length === 0 ? `'{}'::text[]` : `ARRAY[${values.map(text).join(', ')}]::text[]`;

/**
 * The call of agl.lock_and_read for `spec`, as SQL text with its values as literals: it is sent
 * with the BEGIN, in one round trip (the simple protocol takes no parameters).
 */
export function loadStatement(spec: LoadSpec): string {
  const args = [
    `p_rollouts => ${texts(spec.rollouts ?? [])}`,
    `p_skip_locked => ${spec.skipLocked === true}`,
    `p_queue => ${Math.max(0, Math.trunc(spec.queue ?? 0))}`,
    `p_workers => ${texts((spec.workers ?? []).filter((w): w is string => typeof w === 'string'))}`,
    `p_resources => ${spec.resources === undefined ? 'NULL' : text(spec.resources)}`,
    `p_latest_resources => ${spec.latestResources === true}`,
    `p_watchdog => ${spec.watchdog === true}`,
  ];
  return `SELECT agl.lock_and_read(${args.join(', ')}) AS loaded`;
}

/** The entities agl.lock_and_read answered. */
export function loadedOf(loaded: {
  rollouts: RolloutRow[];
  attempts: Attempt[];
  workers: Worker[];
  resources: ResourcesUpdate[];
  queue: string[];
}): Loaded {
  return { ...loaded, rollouts: loaded.rollouts.map(rolloutOf) };
}
