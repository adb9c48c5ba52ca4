import type { DuckDBConnection } from '@duckdb/node-api';
import type { Attempt, ResourcesUpdate, Rollout, Worker } from '../types.js';
import { columnsDdl, type Column, type ColumnValue } from './columns.js';
import { defaultConfig, type Changes, type RolloutState } from './rollout-state.js';
import type { TableRows } from './writer.js';

/**
 * Where the LightningStore's state is kept. Every change appends the entity's new version to a
 * history table (rollout_history, attempt_history, ...), in the same group commit as the
 * request's spans: appends are what DuckDB does fastest, where an upsert per change through a
 * primary-key index cost tens of milliseconds per commit. The views `rollouts`, `attempts`,
 * `resources` and `workers` show the latest version of each, for SQL users and for loading.
 * Times are float seconds since the epoch, as on the wire (`to_timestamp(start_time)` in SQL).
 */
const ROLLOUT_COLUMNS: Column[] = [
  { name: 'rollout_id', type: 'VARCHAR', notNull: true },
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
  { name: 'resources_id', type: 'VARCHAR', notNull: true },
  { name: 'version', type: 'INTEGER', notNull: true },
  { name: 'create_time', type: 'DOUBLE', notNull: true },
  { name: 'update_time', type: 'DOUBLE', notNull: true },
  { name: 'resources', type: 'JSON', notNull: true },
];

const WORKER_COLUMNS: Column[] = [
  { name: 'worker_id', type: 'VARCHAR', notNull: true },
  { name: 'status', type: 'VARCHAR', notNull: true },
  { name: 'heartbeat_stats', type: 'JSON' },
  { name: 'last_heartbeat_time', type: 'DOUBLE' },
  { name: 'last_dequeue_time', type: 'DOUBLE' },
  { name: 'last_busy_time', type: 'DOUBLE' },
  { name: 'last_idle_time', type: 'DOUBLE' },
  { name: 'current_rollout_id', type: 'VARCHAR' },
  { name: 'current_attempt_id', type: 'VARCHAR' },
];

const VERSION: Column = { name: 'version', type: 'BIGINT', notNull: true };

const TABLES = [
  { history: 'rollout_history', view: 'rollouts', key: 'rollout_id', columns: [...ROLLOUT_COLUMNS, VERSION] },
  { history: 'attempt_history', view: 'attempts', key: 'rollout_id, attempt_id', columns: [...ATTEMPT_COLUMNS, VERSION] },
  { history: 'resources_history', view: 'resources', key: 'resources_id', columns: [...RESOURCES_COLUMNS, { ...VERSION, name: 'revision' }] },
  { history: 'worker_history', view: 'workers', key: 'worker_id', columns: [...WORKER_COLUMNS, VERSION] },
] as const;

export const ROLLOUT_TABLES_DDL = TABLES.map(({ history, view, key, columns }) => {
  const order = history === 'resources_history' ? 'revision' : 'version';
  return `${columnsDdl(history, columns)};
  CREATE VIEW ${view} AS SELECT * EXCLUDE (${order}) FROM ${history}
    QUALIFY row_number() OVER (PARTITION BY ${key} ORDER BY ${order} DESC) = 1`;
}).join(';\n');

const json = (value: unknown): string | null => (value === undefined ? null : JSON.stringify(value));

/**
 * The history rows that write `changes` through, each with the next version number (column
 * order as in the tables above).
 */
export function historyRows(changes: Changes, nextVersion: () => number): TableRows[] {
  const rows = (index: number, values: ColumnValue[][]): TableRows => {
    const { history, columns } = TABLES[index];
    return { table: history, columns, rows: { length: values.length, columns: columns.map((_, c) => values.map((row) => row[c])) } };
  };
  const out: TableRows[] = [];
  const add = (index: number, values: ColumnValue[][]) => values.length > 0 && out.push(rows(index, values));
  add(0, [...changes.rollouts].map((r) => [r.rollout_id, json(r.input), r.start_time, r.end_time, r.mode, r.resources_id, r.status, json(r.config), json(r.metadata), nextVersion()]));
  add(1, [...changes.attempts].map((a) => [a.rollout_id, a.attempt_id, a.sequence_id, a.start_time, a.end_time, a.status, a.worker_id, a.last_heartbeat_time, json(a.metadata), nextVersion()]));
  add(2, [...changes.resources].map((s) => [s.resources_id, s.version, s.create_time, s.update_time, json(s.resources), nextVersion()]));
  add(3, [...changes.workers].map((w) => [w.worker_id, w.status, json(w.heartbeat_stats), w.last_heartbeat_time, w.last_dequeue_time, w.last_busy_time, w.last_idle_time, w.current_rollout_id, w.current_attempt_id, nextVersion()]));
  return out;
}

/** The highest version written so far, to continue numbering after a restart. */
export async function lastVersion(connection: DuckDBConnection): Promise<number> {
  const union = TABLES.map(({ history }) => `SELECT max(${history === 'resources_history' ? 'revision' : 'version'}) AS v FROM ${history}`).join(' UNION ALL ');
  const reader = await connection.runAndReadAll(`SELECT coalesce(max(v), 0) FROM (${union})`);
  return Number(reader.getRows()[0][0]);
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
