import type { DuckDBConnection } from '@duckdb/node-api';
import { columnsDdl } from './appender.js';
import {
  DERIVED_CALL_PARTS_DDL,
  DERIVED_CREDITS_DDL,
  DERIVED_REWARD_LABEL_DDL,
  DERIVED_REWARD_TEXT_DDL,
  DERIVED_SKIPPED_DDL,
  DERIVED_TABLES_DDL,
  DERIVED_VERSION,
} from '../sql/derived.js';
import { ROLLOUT_TABLES_DDL, STATE_REPLICA_DDL } from './rollout-tables.js';
import { LOG_COLUMNS, SPAN_COLUMNS } from '../otlp/span-columns.js';
import { VIEWS_SQL } from '../sql/views.js';

/**
 * Schema migrations, applied in order on open; the applied count is kept in agl_meta. Append
 * new steps at the end, never edit a released one: a file written by an older agl must open.
 */
const MIGRATIONS: readonly string[] = [
  `${columnsDdl('spans', SPAN_COLUMNS)};
   ${columnsDdl('logs', LOG_COLUMNS)};`,
  ROLLOUT_TABLES_DDL,
  DERIVED_TABLES_DDL,
  DERIVED_CREDITS_DDL,
  DERIVED_SKIPPED_DDL,
  STATE_REPLICA_DDL,
  // The order spans were committed in, which deletes do not renumber as they do rowids (the
  // span directory deletes what it moved: span-files.ts). The writer numbers new rows.
  `ALTER TABLE spans ADD COLUMN commit_seq BIGINT;
   UPDATE spans SET commit_seq = rowid;`,
  // The same for log records, which the span directory moves too.
  `ALTER TABLE logs ADD COLUMN commit_seq BIGINT;
   UPDATE logs SET commit_seq = rowid;`,
  DERIVED_REWARD_TEXT_DDL,
  DERIVED_CALL_PARTS_DDL,
  DERIVED_REWARD_LABEL_DDL,
];

const SCHEMA_VERSION = MIGRATIONS.length;

export async function migrate(connection: DuckDBConnection): Promise<void> {
  await connection.run('CREATE TABLE IF NOT EXISTS agl_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)');
  const reader = await connection.runAndReadAll("SELECT value FROM agl_meta WHERE key = 'schema_version'");
  const current = reader.currentRowCount === 0 ? 0 : Number(reader.getRows()[0][0]);
  if (current > SCHEMA_VERSION) {
    throw new Error(`the database was written by a newer agl (schema ${current}, this agl knows ${SCHEMA_VERSION})`);
  }
  for (let version = current; version < SCHEMA_VERSION; version++) {
    await connection.run('BEGIN TRANSACTION');
    try {
      await connection.run(MIGRATIONS[version]);
      await connection.run("INSERT OR REPLACE INTO agl_meta VALUES ('schema_version', $version)", {
        version: String(version + 1),
      });
      await connection.run('COMMIT');
    } catch (error) {
      await connection.run('ROLLBACK');
      throw error;
    }
  }
  await checkDerivedVersion(connection);
  await connection.run(VIEWS_SQL);
}

/** On a writable open: starts the derivation over when the file's rows were derived by other SQL. */
async function checkDerivedVersion(connection: DuckDBConnection): Promise<void> {
  const reader = await connection.runAndReadAll("SELECT value FROM agl_meta WHERE key = 'derived_version'");
  if (reader.currentRowCount > 0 && String(reader.getRows()[0][0]) === DERIVED_VERSION) return;
  await connection.run(`BEGIN TRANSACTION;
    DELETE FROM derived_calls; DELETE FROM derived_rewards; DELETE FROM derived_agents; DELETE FROM derived_skipped;
    INSERT OR REPLACE INTO agl_meta VALUES ('derived_through', '-1'), ('derived_version', '${DERIVED_VERSION}');
    COMMIT;`);
}
