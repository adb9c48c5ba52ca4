/**
 * Where the LightningStore's state is kept. Every change appends the entity's new version, as
 * the JSON the REST API answers, to one table `state_history`, in the same group commit as the
 * request's spans: one append per commit is what DuckDB does fastest (an upsert per change
 * through a primary-key index cost tens of milliseconds a commit; one table per kind, a flush
 * each). The views `rollouts`, `attempts`, `resources` and `workers` show the latest version of
 * each entity with typed columns, for SQL users and for loading.
 * Times are float seconds since the epoch, as on the wire (`to_timestamp(start_time)` in SQL).
 */
import type { DuckDBConnection } from '@duckdb/node-api';
import {
  FINISHED_ROLLOUT_STATUSES,
  type Attempt,
  type ResourcesUpdate,
  type Rollout,
  type Worker,
} from '../api/types.js';
import { columnsDdl } from './appender.js';
import type { Column, ColumnValue } from '../otlp/columns.js';
import type { Changes, RolloutState } from './rollout-state.js';
import { storedRollout } from './stored-rollouts.js';
import type { TableRows } from './writer.js';

const HISTORY_COLUMNS: Column[] = [
  { name: 'kind', type: 'VARCHAR', notNull: true },
  { name: 'key', type: 'VARCHAR', notNull: true },
  { name: 'version', type: 'BIGINT', notNull: true },
  { name: 'data', type: 'JSON', notNull: true },
];

type Kind = 'rollout' | 'attempt' | 'resources' | 'worker';

/** Typed columns of each view: [name, SQL type, or 'JSON' to keep it a JSON value]. */
const VIEWS: Record<Kind, { view: string; columns: [string, string][] }> = {
  rollout: {
    view: 'rollouts',
    columns: [
      ['rollout_id', 'VARCHAR'],
      ['input', 'JSON'],
      ['start_time', 'DOUBLE'],
      ['end_time', 'DOUBLE'],
      ['mode', 'VARCHAR'],
      ['resources_id', 'VARCHAR'],
      ['status', 'VARCHAR'],
      ['config', 'JSON'],
      ['metadata', 'JSON'],
    ],
  },
  attempt: {
    view: 'attempts',
    columns: [
      ['rollout_id', 'VARCHAR'],
      ['attempt_id', 'VARCHAR'],
      ['sequence_id', 'INTEGER'],
      ['start_time', 'DOUBLE'],
      ['end_time', 'DOUBLE'],
      ['status', 'VARCHAR'],
      ['worker_id', 'VARCHAR'],
      ['last_heartbeat_time', 'DOUBLE'],
      ['metadata', 'JSON'],
    ],
  },
  resources: {
    view: 'resources',
    columns: [
      ['resources_id', 'VARCHAR'],
      ['version', 'INTEGER'],
      ['create_time', 'DOUBLE'],
      ['update_time', 'DOUBLE'],
      ['resources', 'JSON'],
    ],
  },
  worker: {
    view: 'workers',
    columns: [
      ['worker_id', 'VARCHAR'],
      ['status', 'VARCHAR'],
      ['heartbeat_stats', 'JSON'],
      ['last_heartbeat_time', 'DOUBLE'],
      ['last_dequeue_time', 'DOUBLE'],
      ['last_busy_time', 'DOUBLE'],
      ['last_idle_time', 'DOUBLE'],
      ['current_rollout_id', 'VARCHAR'],
      ['current_attempt_id', 'VARCHAR'],
    ],
  },
};

export const ROLLOUT_TABLES_DDL = [
  columnsDdl('state_history', HISTORY_COLUMNS),
  ...Object.entries(VIEWS).map(([kind, { view, columns }]) => {
    const select = columns.map(([name, type]) =>
      type === 'JSON' ? `data->'${name}' AS ${name}` : `(data->>'${name}')::${type} AS ${name}`,
    );
    return `CREATE VIEW ${view} AS SELECT ${select.join(', ')} FROM state_history WHERE kind = '${kind}'
      QUALIFY row_number() OVER (PARTITION BY key ORDER BY version DESC) = 1`;
  }),
].join(';\n');

/** The history rows that write `changes` through, each with the next version number. */
export function historyRows(changes: Changes, nextVersion: () => number): TableRows[] {
  const values: ColumnValue[][] = [[], [], [], []];
  const add = (kind: Kind, key: string, entity: object) => {
    values[0].push(kind);
    values[1].push(key);
    values[2].push(nextVersion());
    values[3].push(JSON.stringify(entity));
  };
  for (const r of changes.rollouts) add('rollout', r.rollout_id, r);
  for (const a of changes.attempts) add('attempt', `${a.rollout_id}/${a.attempt_id}`, a);
  for (const s of changes.resources) add('resources', s.resources_id, s);
  for (const w of changes.workers) add('worker', w.worker_id, w);
  const length = values[0].length;
  return length === 0 ? [] : [{ table: 'state_history', columns: HISTORY_COLUMNS, rows: { length, columns: values } }];
}

/**
 * Where a server whose state lives in PostgreSQL has copied it up to: its database's instance id
 * and the snapshot horizon of the last copy (see store/postgres/replica.ts). One row per copy.
 */
const REPLICA_COLUMNS: Column[] = [
  { name: 'source', type: 'VARCHAR', notNull: true },
  { name: 'xmin', type: 'BIGINT', notNull: true },
];

export const STATE_REPLICA_DDL = columnsDdl('state_replica', REPLICA_COLUMNS);

/** An entity version copied from PostgreSQL: its log row's id is its version. */
export interface CopiedVersion {
  readonly kind: string;
  readonly key: string;
  readonly version: number;
  readonly data: string;
}

/** The rows that append copied versions to state_history and note the copy's horizon. */
export function replicaRows(versions: readonly CopiedVersion[], source: string, xmin: bigint): TableRows[] {
  const history: ColumnValue[][] = [
    versions.map((v) => v.kind),
    versions.map((v) => v.key),
    versions.map((v) => v.version),
    versions.map((v) => v.data),
  ];
  return [
    ...(versions.length === 0
      ? []
      : [{ table: 'state_history', columns: HISTORY_COLUMNS, rows: { length: versions.length, columns: history } }]),
    { table: 'state_replica', columns: REPLICA_COLUMNS, rows: { length: 1, columns: [[source], [xmin]] } },
  ];
}

/**
 * Which state a DuckDB file holds: its own (the embedded store's; null, also for a new file), or
 * a copy of a PostgreSQL database's (its instance id, and the horizon to continue copying from).
 * A file holds one or the other for good: a server that meets the other kind refuses to open it.
 */
export async function stateSource(
  connection: DuckDBConnection,
): Promise<{ source: string | null; ownRows: boolean; xmin: bigint }> {
  const reader = await connection.runAndReadAll(
    `SELECT (SELECT string_agg(DISTINCT source) FROM state_replica) AS source,
      (SELECT max(xmin) FROM state_replica) AS xmin, (SELECT count(*) FROM state_history) AS history`,
  );
  const [source, xmin, history] = reader.getRows()[0];
  return {
    source: source === null ? null : String(source),
    ownRows: source === null && Number(history) > 0,
    xmin: xmin === null ? 0n : BigInt(String(xmin)),
  };
}

/** A field of a history row, where DuckDB can read the row as JSON (NULL where it cannot). */
const jsonField = (field: string) => `CASE WHEN json_valid(data) THEN data->>'${field}' END`;

/**
 * The rollouts that loading leaves in the database (RolloutState.retire): finished, their latest
 * attempt not running, beyond the `keep` changed last. A temporary table of the connection.
 */
const retiredSql = (keep: number) => `CREATE OR REPLACE TEMP TABLE agl_retired AS
  WITH latest AS (SELECT kind, key, arg_max(data, version) AS data, max(version) AS version FROM state_history
      WHERE kind IN ('rollout', 'attempt') GROUP BY kind, key),
    live AS (SELECT rollout_id FROM (SELECT ${jsonField('rollout_id')} AS rollout_id, ${jsonField('status')} AS status,
        TRY_CAST(${jsonField('sequence_id')} AS BIGINT) AS sequence_id FROM latest WHERE kind = 'attempt')
      WHERE rollout_id IS NOT NULL GROUP BY rollout_id HAVING arg_max(status, sequence_id) IN ('preparing', 'running'))
  SELECT key, coalesce(TRY_CAST(${jsonField('start_time')} AS DOUBLE), 'infinity') AS start_time,
    coalesce(TRY_CAST(${jsonField('end_time')} AS DOUBLE), 'infinity') AS end_time FROM latest
  WHERE kind = 'rollout' AND ${jsonField('status')} IN (${FINISHED_ROLLOUT_STATUSES.map((s) => `'${s}'`).join(', ')})
    AND key NOT IN (SELECT rollout_id FROM live)
  QUALIFY row_number() OVER (ORDER BY version DESC) > ${Math.floor(keep)}`;

/** Whether a history row belongs to a retired rollout. */
const RETIRED_ROW = `coalesce((kind = 'rollout' AND key IN (SELECT key FROM agl_retired))
  OR (kind = 'attempt' AND ${jsonField('rollout_id')} IN (SELECT key FROM agl_retired)), false)`;

/**
 * Loads the latest version of every entity into `state`, replacing what it held (on open, and
 * after a failed write: the file is the truth), but for finished rollouts beyond the `keep`
 * changed last, which stay in the database (RolloutState.retire). Returns the highest version
 * written so far, to continue numbering from.
 */
export async function loadRolloutState(
  connection: DuckDBConnection,
  state: RolloutState,
  keep: number,
): Promise<number> {
  await connection.run(retiredSql(keep));
  try {
    // Each entity in the order it was first written: maps iterate in creation order, as before.
    const entities = await connection.runAndReadAll(
      `SELECT kind, data, min(version) OVER (PARTITION BY kind, key) AS created FROM state_history
        WHERE NOT ${RETIRED_ROW}
        QUALIFY row_number() OVER (PARTITION BY kind, key ORDER BY version DESC) = 1 ORDER BY created`,
    );
    const retired = await connection.runAndReadAll(
      `SELECT (SELECT count(*) FROM agl_retired), (SELECT count(DISTINCT key) FROM state_history WHERE kind = 'attempt' AND ${RETIRED_ROW}),
        (SELECT coalesce(max(start_time), '-infinity') FROM agl_retired), (SELECT coalesce(max(end_time), '-infinity') FROM agl_retired)`,
    );
    // The queue's order: when each queued rollout last entered a queuing status. A row that
    // DuckDB cannot read as JSON (a lone surrogate, stored by an older agl) does not stop the open:
    // its rollout joins the queue after the others (restoreQueue).
    const queue = await connection.runAndReadAll(
      `WITH r AS (SELECT key, version, CASE WHEN json_valid(data) THEN data->>'status' IN ('queuing', 'requeuing') END AS queued
          FROM state_history WHERE kind = 'rollout'),
        latest AS (SELECT key, arg_max(queued, version) AS queued, coalesce(max(version) FILTER (WHERE NOT queued), 0) AS left_at FROM r GROUP BY key)
      SELECT r.key FROM r JOIN latest USING (key) WHERE latest.queued AND r.version > latest.left_at GROUP BY r.key ORDER BY min(r.version)`,
    );
    const version = await connection.runAndReadAll('SELECT coalesce(max(version), 0) FROM state_history');
    // From here on synchronous: nobody sees the state half loaded.
    state.clear();
    const rollouts: Rollout[] = [];
    const attempts = new Map<string, Attempt[]>();
    for (const [kind, data] of entities.getRows()) {
      const entity = JSON.parse(String(data));
      if (kind === 'rollout') {
        rollouts.push(entity as Rollout);
      } else if (kind === 'attempt') {
        const attempt = entity as Attempt;
        const list = attempts.get(attempt.rollout_id) ?? [];
        list.push(attempt);
        attempts.set(attempt.rollout_id, list);
      } else if (kind === 'resources') {
        state.resources.set((entity as ResourcesUpdate).resources_id, entity as ResourcesUpdate);
      } else if (kind === 'worker') {
        state.workers.set((entity as Worker).worker_id, entity as Worker);
      }
    }
    for (const rollout of rollouts) state.hold(storedRollout(rollout), attempts.get(rollout.rollout_id) ?? []);
    const [retiredRollouts, retiredAttempts, newestStart, latestEnd] = retired.getRows()[0].map(Number);
    state.retired.rollouts = retiredRollouts;
    state.retired.attempts = retiredAttempts;
    state.retired.newestStart = newestStart;
    state.retired.latestEnd = latestEnd;
    state.restoreQueue(queue.getRows().map(([key]) => String(key)));
    return Number(version.getRows()[0][0]);
  } finally {
    await connection.run('DROP TABLE IF EXISTS agl_retired');
  }
}
