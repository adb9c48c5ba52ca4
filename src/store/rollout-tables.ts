import type { DuckDBConnection } from '@duckdb/node-api';
import type { Attempt, ResourcesUpdate, Rollout, Worker } from '../types.js';
import { columnsDdl, type Column, type ColumnValue } from './columns.js';
import { defaultConfig, type Changes, type RolloutState } from './rollout-state.js';
import type { Upsert } from './writer.js';

/**
 * Where the LightningStore's state is kept: one row per rollout, attempt, resources snapshot and
 * worker, replaced (upserted) on every change, in the same group commit as the request's spans.
 * Times are float seconds since the epoch, as on the wire (`to_timestamp(start_time)` in SQL).
 */
const ROLLOUT_COLUMNS: Column[] = [
  { name: 'rollout_id', type: 'VARCHAR', primaryKey: true },
  { name: 'input', type: 'JSON' },
  { name: 'start_time', type: 'DOUBLE', notNull: true },
  { name: 'end_time', type: 'DOUBLE' },
  { name: 'mode', type: 'VARCHAR' },
  { name: 'resources_id', type: 'VARCHAR' },
  { name: 'status', type: 'VARCHAR', notNull: true },
  { name: 'config', type: 'JSON', notNull: true },
  { name: 'metadata', type: 'JSON' },
];

const ATTEMPT_COLUMNS: Column[] = [
  { name: 'rollout_id', type: 'VARCHAR', notNull: true },
  { name: 'attempt_id', type: 'VARCHAR', notNull: true },
  { name: 'sequence_id', type: 'INTEGER', notNull: true },
  { name: 'start_time', type: 'DOUBLE', notNull: true },
  { name: 'end_time', type: 'DOUBLE' },
  { name: 'status', type: 'VARCHAR', notNull: true },
  { name: 'worker_id', type: 'VARCHAR' },
  { name: 'last_heartbeat_time', type: 'DOUBLE' },
  { name: 'metadata', type: 'JSON' },
];

const RESOURCES_COLUMNS: Column[] = [
  { name: 'resources_id', type: 'VARCHAR', primaryKey: true },
  { name: 'version', type: 'INTEGER', notNull: true },
  { name: 'create_time', type: 'DOUBLE', notNull: true },
  { name: 'update_time', type: 'DOUBLE', notNull: true },
  { name: 'resources', type: 'JSON', notNull: true },
];

const WORKER_COLUMNS: Column[] = [
  { name: 'worker_id', type: 'VARCHAR', primaryKey: true },
  { name: 'status', type: 'VARCHAR', notNull: true },
  { name: 'heartbeat_stats', type: 'JSON' },
  { name: 'last_heartbeat_time', type: 'DOUBLE' },
  { name: 'last_dequeue_time', type: 'DOUBLE' },
  { name: 'last_busy_time', type: 'DOUBLE' },
  { name: 'last_idle_time', type: 'DOUBLE' },
  { name: 'current_rollout_id', type: 'VARCHAR' },
  { name: 'current_attempt_id', type: 'VARCHAR' },
];

export const ROLLOUT_TABLES_DDL = [
  columnsDdl('rollouts', ROLLOUT_COLUMNS),
  columnsDdl('attempts', ATTEMPT_COLUMNS).replace(/\n\)$/, ',\n  PRIMARY KEY (rollout_id, attempt_id)\n)'),
  columnsDdl('resources', RESOURCES_COLUMNS),
  columnsDdl('workers', WORKER_COLUMNS),
].join(';\n');

const json = (value: unknown): string | null => (value === undefined ? null : JSON.stringify(value));

/** The upserts that write `changes` through (column order as in the tables above). */
export function upsertsFor(changes: Changes): Upsert[] {
  const upserts: Upsert[] = [];
  for (const r of changes.rollouts) {
    upserts.push({ table: 'rollouts', key: r.rollout_id, row: [r.rollout_id, json(r.input), r.start_time, r.end_time, r.mode, r.resources_id, r.status, json(r.config), json(r.metadata)] });
  }
  for (const a of changes.attempts) {
    upserts.push({ table: 'attempts', key: `${a.rollout_id}/${a.attempt_id}`, row: [a.rollout_id, a.attempt_id, a.sequence_id, a.start_time, a.end_time, a.status, a.worker_id, a.last_heartbeat_time, json(a.metadata)] });
  }
  for (const s of changes.resources) {
    upserts.push({ table: 'resources', key: s.resources_id, row: [s.resources_id, s.version, s.create_time, s.update_time, json(s.resources)] });
  }
  for (const w of changes.workers) {
    upserts.push({ table: 'workers', key: w.worker_id, row: [w.worker_id, w.status, json(w.heartbeat_stats), w.last_heartbeat_time, w.last_dequeue_time, w.last_busy_time, w.last_idle_time, w.current_rollout_id, w.current_attempt_id] satisfies ColumnValue[] });
  }
  return upserts;
}

/** Loads the state kept in the tables into memory (on open). */
export async function loadRolloutState(connection: DuckDBConnection, state: RolloutState): Promise<void> {
  const rows = async (sql: string) => (await connection.runAndReadAll(sql)).getRowObjectsJS() as Record<string, unknown>[];
  const parse = (value: unknown) => (value === null || value === undefined ? null : JSON.parse(String(value)));
  for (const r of await rows('SELECT * FROM rollouts ORDER BY start_time')) {
    const rollout: Rollout = {
      rollout_id: String(r.rollout_id),
      input: parse(r.input),
      start_time: Number(r.start_time),
      end_time: r.end_time === null ? null : Number(r.end_time),
      mode: (r.mode as Rollout['mode']) ?? null,
      resources_id: (r.resources_id as string | null) ?? null,
      status: r.status as Rollout['status'],
      config: defaultConfig(parse(r.config)),
      metadata: parse(r.metadata),
    };
    state.rollouts.set(rollout.rollout_id, rollout);
  }
  for (const a of await rows('SELECT * FROM attempts ORDER BY rollout_id, sequence_id')) {
    const attempt: Attempt = {
      rollout_id: String(a.rollout_id),
      attempt_id: String(a.attempt_id),
      sequence_id: Number(a.sequence_id),
      start_time: Number(a.start_time),
      end_time: a.end_time === null ? null : Number(a.end_time),
      status: a.status as Attempt['status'],
      worker_id: (a.worker_id as string | null) ?? null,
      last_heartbeat_time: a.last_heartbeat_time === null ? null : Number(a.last_heartbeat_time),
      metadata: parse(a.metadata),
    };
    const list = state.attempts.get(attempt.rollout_id) ?? [];
    list.push(attempt);
    state.attempts.set(attempt.rollout_id, list);
  }
  for (const s of await rows('SELECT * FROM resources ORDER BY update_time')) {
    const update: ResourcesUpdate = {
      resources_id: String(s.resources_id),
      version: Number(s.version),
      create_time: Number(s.create_time),
      update_time: Number(s.update_time),
      resources: parse(s.resources),
    };
    state.resources.set(update.resources_id, update);
  }
  for (const w of await rows('SELECT * FROM workers')) {
    const worker: Worker = {
      worker_id: String(w.worker_id),
      status: w.status as Worker['status'],
      heartbeat_stats: parse(w.heartbeat_stats),
      last_heartbeat_time: (w.last_heartbeat_time as number | null) ?? null,
      last_dequeue_time: (w.last_dequeue_time as number | null) ?? null,
      last_busy_time: (w.last_busy_time as number | null) ?? null,
      last_idle_time: (w.last_idle_time as number | null) ?? null,
      current_rollout_id: (w.current_rollout_id as string | null) ?? null,
      current_attempt_id: (w.current_attempt_id as string | null) ?? null,
    };
    state.workers.set(worker.worker_id, worker);
  }
  state.restoreQueue();
}
