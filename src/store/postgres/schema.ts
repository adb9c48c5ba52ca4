import type { PgDatabase } from './database.js';
import { LOCK_AND_READ_DDL } from './load.js';
import { LOCKS } from './locks.js';

/**
 * The shared state's tables, in the schema `agl` of the database `--state` names. Every
 * server migrates on start, one at a time (an advisory lock); the applied count is kept in
 * agl.meta. Append new steps at the end, never edit a released one.
 *
 * Entities have typed columns (what the queue, the watchdog and SQL users read) and their JSON
 * parts as `json`, which keeps the text as sent (key order included). `state_log` holds every
 * version of every entity, as the REST API answers it: servers copy it into their DuckDB file's
 * `state_history` (replica.ts), so that the SQL views there see the whole fleet's state.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE SEQUENCE agl.queue_order;
  CREATE TABLE agl.rollouts (
    rollout_id text PRIMARY KEY,
    created bigint GENERATED ALWAYS AS IDENTITY,
    input json NOT NULL,
    start_time float8 NOT NULL,
    end_time float8,
    mode text,
    resources_id text,
    status text NOT NULL,
    config json NOT NULL,
    metadata json NOT NULL,
    latest_attempt_id text,
    queue_position bigint
  );
  CREATE INDEX rollouts_created ON agl.rollouts (created);
  CREATE INDEX rollouts_queue ON agl.rollouts (queue_position) WHERE queue_position IS NOT NULL;
  CREATE INDEX rollouts_active ON agl.rollouts (rollout_id) WHERE status IN ('preparing', 'running');
  CREATE TABLE agl.attempts (
    rollout_id text NOT NULL,
    attempt_id text NOT NULL,
    sequence_id integer NOT NULL,
    start_time float8 NOT NULL,
    end_time float8,
    status text NOT NULL,
    worker_id text,
    last_heartbeat_time float8,
    metadata json NOT NULL,
    heartbeat_logged float8,
    PRIMARY KEY (rollout_id, attempt_id)
  );
  CREATE INDEX attempts_sequence ON agl.attempts (rollout_id, sequence_id);
  CREATE TABLE agl.resources (
    resources_id text PRIMARY KEY,
    created bigint GENERATED ALWAYS AS IDENTITY,
    version integer NOT NULL,
    create_time float8 NOT NULL,
    update_time float8 NOT NULL,
    resources json NOT NULL
  );
  CREATE INDEX resources_latest ON agl.resources (update_time DESC, created DESC);
  CREATE TABLE agl.workers (
    worker_id text PRIMARY KEY,
    created bigint GENERATED ALWAYS AS IDENTITY,
    status text NOT NULL,
    heartbeat_stats json NOT NULL,
    last_heartbeat_time float8,
    last_dequeue_time float8,
    last_busy_time float8,
    last_idle_time float8,
    current_rollout_id text,
    current_attempt_id text
  );
  CREATE TABLE agl.span_sequences (rollout_id text PRIMARY KEY, last_id bigint NOT NULL, step bigint NOT NULL);
  CREATE TABLE agl.state_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    kind text NOT NULL,
    key text NOT NULL,
    data json NOT NULL
  );
  CREATE INDEX state_log_xid ON agl.state_log (xid);
  INSERT INTO agl.meta VALUES ('instance_id', gen_random_uuid()::text);
  ${LOCK_AND_READ_DDL};`,
];

export const SCHEMA_VERSION = MIGRATIONS.length;

/** Creates or updates the schema; returns the database's instance id (which names it in DuckDB files). */
export async function migrate(db: PgDatabase): Promise<string> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1, 0)', [LOCKS.migrate]);
    await tx.query('CREATE SCHEMA IF NOT EXISTS agl');
    await tx.query('CREATE TABLE IF NOT EXISTS agl.meta (key text PRIMARY KEY, value text NOT NULL)');
    const [found] = await tx.query<{ value: string }>("SELECT value FROM agl.meta WHERE key = 'schema_version'");
    const current = found ? Number(found.value) : 0;
    if (current > SCHEMA_VERSION)
      throw new Error(
        `the PostgreSQL state was written by a newer agl (schema ${current}, this agl knows ${SCHEMA_VERSION})`,
      );
    for (let version = current; version < SCHEMA_VERSION; version++) await tx.query(MIGRATIONS[version]);
    await tx.query(
      "INSERT INTO agl.meta VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      [String(SCHEMA_VERSION)],
    );
    const [instance] = await tx.query<{ value: string }>("SELECT value FROM agl.meta WHERE key = 'instance_id'");
    return instance.value;
  });
}
