import type { Attempt, ResourcesUpdate, Rollout, Worker } from '../../api/types.js';
import { RolloutState, type Changes } from '../rollout-state.js';
import type { Sql } from './database.js';
import { ATTEMPT_COLUMNS, attemptKey, json, RESOURCES_COLUMNS, ROLLOUT_COLUMNS, WORKER_COLUMNS } from './entities.js';
import { LOCKS } from './locks.js';

/**
 * The entities an operation works on, read (and locked) in its transaction. An operation runs on
 * a RolloutState holding just these, so that the status machine is the embedded store's own.
 */
export interface Loaded {
  readonly rollouts: Rollout[];
  /** Every attempt of the rollouts, in sequence order. */
  readonly attempts: Attempt[];
  readonly workers: Worker[];
  readonly resources: ResourcesUpdate[];
  /** The queued rollouts, in queue order (a dequeue takes them from the front). */
  readonly queue: string[];
}

/** What an operation's changes said to other servers: a rollout joined the queue, or finished. */
export interface Signals {
  queued: boolean;
  finished: boolean;
}

/** A RolloutState of copies of `loaded` (an operation that runs twice starts from the same entities). */
export function stateOf(loaded: Loaded, signals: Signals): RolloutState {
  const state = new RolloutState();
  for (const rollout of loaded.rollouts) state.rollouts.set(rollout.rollout_id, structuredClone(rollout));
  for (const attempt of loaded.attempts) {
    const list = state.attempts.get(attempt.rollout_id) ?? [];
    list.push(structuredClone(attempt));
    state.attempts.set(attempt.rollout_id, list);
  }
  for (const worker of loaded.workers) state.workers.set(worker.worker_id, structuredClone(worker));
  for (const resources of loaded.resources) state.resources.set(resources.resources_id, structuredClone(resources));
  state.restoreQueue(loaded.queue);
  state.onQueued = () => (signals.queued = true);
  state.onFinished = () => (signals.finished = true);
  return state;
}

/**
 * Takes the advisory locks of workers an operation touched beyond those lock_and_read locked (in
 * id order), then reads those that exist. Every change of a worker holds its lock: a worker that
 * does not exist yet cannot be created twice.
 */
export async function lockWorkers(tx: Sql, workerIds: string[]): Promise<Worker[]> {
  const sorted = [...new Set(workerIds)].sort();
  await tx.query(
    'SELECT pg_advisory_xact_lock($1, hashtext(id)) FROM unnest($2::text[]) WITH ORDINALITY AS t(id, n) ORDER BY n',
    [LOCKS.worker, sorted],
  );
  return tx.query<Worker>(`SELECT ${WORKER_COLUMNS} FROM agl.workers WHERE worker_id = ANY($1)`, [sorted]);
}

/** The resources updated last (ties: the one created last), as the embedded store picks them. */
export function latestResources(sql: Sql): Promise<ResourcesUpdate[]> {
  return sql.query<ResourcesUpdate>(
    `SELECT ${RESOURCES_COLUMNS} FROM agl.resources ORDER BY update_time DESC, created DESC LIMIT 1`,
  );
}

/** Numbered parameters of one statement. */
class Parameters {
  readonly values: unknown[] = [];
  add(value: unknown, type: string): string {
    this.values.push(value);
    return `$${this.values.length}::${type}`;
  }
}

const QUEUED = "('queuing', 'requeuing')";

/**
 * Writes an operation's changes in one statement: each changed entity upserted and its new
 * version appended to state_log. Attempts in `changes.heartbeats` get their heartbeat time
 * written, but no log row (the embedded store writes a heartbeat alone at most every few
 * seconds, too).
 */
export async function writeChanges(tx: Sql, state: RolloutState, changes: Changes, now: number): Promise<void> {
  state.heartbeatsStored(changes, now);
  const p = new Parameters();
  const parts: string[] = [];
  const rollouts = [...changes.rollouts];
  if (rollouts.length > 0) parts.push(upsertRollouts(p, state, rollouts));
  const logged = [...changes.attempts];
  const attempts = [...logged, ...[...changes.heartbeats].filter((a) => !changes.attempts.has(a))];
  if (attempts.length > 0) parts.push(upsertAttempts(p, attempts, new Set(logged)));
  const resources = [...changes.resources];
  if (resources.length > 0) parts.push(upsertResources(p, resources));
  const workers = [...changes.workers];
  if (workers.length > 0) parts.push(upsertWorkers(p, workers));
  const log = [
    ...rollouts.map((r) => ['rollout', r.rollout_id, r] as const),
    ...logged.map((a) => ['attempt', attemptKey(a), a] as const),
    ...resources.map((r) => ['resources', r.resources_id, r] as const),
    ...workers.map((w) => ['worker', w.worker_id, w] as const),
  ];
  if (log.length > 0)
    parts.push(
      `INSERT INTO agl.state_log (kind, key, data) SELECT * FROM ${unnest(p, log, [
        [([kind]) => kind, 'text[]'],
        [([, key]) => key, 'text[]'],
        [([, , entity]) => JSON.stringify(entity), 'json[]'],
      ])}`,
    );
  if (parts.length === 0) return;
  const [last, ...before] = parts.reverse();
  const ctes = before.map((part, i) => `w${i} AS (${part})`);
  await tx.query(`${ctes.length === 0 ? '' : `WITH ${ctes.join(',\n')} `}${last}`, p.values);
}

/** `unnest(...)` of one array parameter per column: [a row's value, the SQL array type]. */
function unnest<T>(p: Parameters, rows: readonly T[], columns: [(row: T) => unknown, string][]): string {
  return `unnest(${columns.map(([value, type]) => p.add(rows.map(value), type)).join(', ')})`;
}

function upsertRollouts(p: Parameters, state: RolloutState, rollouts: Rollout[]): string {
  const rows = unnest(p, rollouts, [
    [(r) => r.rollout_id, 'text[]'],
    [(r) => json(r.input), 'json[]'],
    [(r) => r.start_time, 'float8[]'],
    [(r) => r.end_time, 'float8[]'],
    [(r) => r.mode, 'text[]'],
    [(r) => r.resources_id, 'text[]'],
    [(r) => r.status, 'text[]'],
    [(r) => json(r.config), 'json[]'],
    [(r) => json(r.metadata), 'json[]'],
    [(r) => state.latestAttempt(r.rollout_id)?.attempt_id ?? null, 'text[]'],
  ]);
  // A rollout that joins the queue goes to its end; one that stays queued keeps its place.
  return `INSERT INTO agl.rollouts AS t (${ROLLOUT_COLUMNS}, queue_position)
    SELECT u.*, CASE WHEN u.status IN ${QUEUED} THEN nextval('agl.queue_order') END
    FROM ${rows} AS u(${ROLLOUT_COLUMNS})
    ON CONFLICT (rollout_id) DO UPDATE SET input = excluded.input, start_time = excluded.start_time,
      end_time = excluded.end_time, mode = excluded.mode, resources_id = excluded.resources_id, status = excluded.status,
      config = excluded.config, metadata = excluded.metadata, latest_attempt_id = excluded.latest_attempt_id,
      queue_position = CASE WHEN excluded.status IN ${QUEUED} THEN coalesce(t.queue_position, excluded.queue_position) END`;
}

function upsertAttempts(p: Parameters, attempts: Attempt[], logged: ReadonlySet<Attempt>): string {
  const rows = unnest(p, attempts, [
    [(a) => a.rollout_id, 'text[]'],
    [(a) => a.attempt_id, 'text[]'],
    [(a) => a.sequence_id, 'int4[]'],
    [(a) => a.start_time, 'float8[]'],
    [(a) => a.end_time, 'float8[]'],
    [(a) => a.status, 'text[]'],
    [(a) => a.worker_id, 'text[]'],
    [(a) => a.last_heartbeat_time, 'float8[]'],
    [(a) => json(a.metadata), 'json[]'],
    // When the heartbeat time was last written to the log (the fast heartbeat path reads it).
    [(a) => (logged.has(a) ? (a.last_heartbeat_time ?? 0) : null), 'float8[]'],
  ]);
  return `INSERT INTO agl.attempts AS t (${ATTEMPT_COLUMNS}, heartbeat_logged)
    SELECT * FROM ${rows}
    ON CONFLICT (rollout_id, attempt_id) DO UPDATE SET sequence_id = excluded.sequence_id, start_time = excluded.start_time,
      end_time = excluded.end_time, status = excluded.status, worker_id = excluded.worker_id,
      last_heartbeat_time = excluded.last_heartbeat_time, metadata = excluded.metadata,
      heartbeat_logged = coalesce(excluded.heartbeat_logged, t.heartbeat_logged)`;
}

function upsertResources(p: Parameters, resources: ResourcesUpdate[]): string {
  const rows = unnest(p, resources, [
    [(r) => r.resources_id, 'text[]'],
    [(r) => r.version, 'int4[]'],
    [(r) => r.create_time, 'float8[]'],
    [(r) => r.update_time, 'float8[]'],
    [(r) => json(r.resources), 'json[]'],
  ]);
  return `INSERT INTO agl.resources AS t (${RESOURCES_COLUMNS})
    SELECT * FROM ${rows}
    ON CONFLICT (resources_id) DO UPDATE SET version = excluded.version, create_time = excluded.create_time,
      update_time = excluded.update_time, resources = excluded.resources`;
}

function upsertWorkers(p: Parameters, workers: Worker[]): string {
  const rows = unnest(p, workers, [
    [(w) => w.worker_id, 'text[]'],
    [(w) => w.status, 'text[]'],
    [(w) => json(w.heartbeat_stats), 'json[]'],
    [(w) => w.last_heartbeat_time, 'float8[]'],
    [(w) => w.last_dequeue_time, 'float8[]'],
    [(w) => w.last_busy_time, 'float8[]'],
    [(w) => w.last_idle_time, 'float8[]'],
    [(w) => w.current_rollout_id, 'text[]'],
    [(w) => w.current_attempt_id, 'text[]'],
  ]);
  return `INSERT INTO agl.workers AS t (${WORKER_COLUMNS})
    SELECT * FROM ${rows}
    ON CONFLICT (worker_id) DO UPDATE SET status = excluded.status, heartbeat_stats = excluded.heartbeat_stats,
      last_heartbeat_time = excluded.last_heartbeat_time, last_dequeue_time = excluded.last_dequeue_time,
      last_busy_time = excluded.last_busy_time, last_idle_time = excluded.last_idle_time,
      current_rollout_id = excluded.current_rollout_id, current_attempt_id = excluded.current_attempt_id`;
}
