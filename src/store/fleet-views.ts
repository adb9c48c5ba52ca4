/**
 * The SQL of the span directory (span-files.ts): the rows a move writes (spans, and log records
 * as they are, marked when GenAI log events), and the schema `fleet` whose views read every
 * server's spans. A moved file holds each span with what the deriver
 * made of it (its call, rewards, agent, whether it was unreadable), so that no server derives
 * another's spans: the views over the directory read those columns in place.
 *
 * The schema `fleet` defines `spans`, `logs`, `genai_log_events`, `derived_calls`, `derived_rewards`,
 * `derived_agents`, `derived_skipped` and `credited_calls_ready` over the directory's files plus
 * this server's rows not moved yet, then creates the read views (`llm_calls`, `rewards`, ...: READ_VIEWS_SQL)
 * again in it, where those names resolve to its own views before the file's tables. A server
 * with a span directory reads with `search_path = 'fleet,main'`: every query, view, adapter and
 * export sees all servers' spans, and `main.spans` the file's own.
 */
import { join } from 'node:path';
import { LOG_COLUMNS, SPAN_COLUMNS } from '../otlp/span-columns.js';
import { CALL_FIELDS, evaluationsFrom, isLogEvent, OWN_CALLS_ONLY, rewardTextOf } from '../sql/derived.js';
import { sqlText } from '../sql/literals.js';
import { derivedOnlyViewsSql, READ_VIEWS_SQL } from '../sql/views.js';
import type { ReadSettings } from './query.js';

/** What a server with a span directory reads through: its views first, then the file's tables. */
export const FLEET_SEARCH_PATH = 'fleet,main';

/**
 * The schema of the directory's derived-only views (derivedOnlyViewsSql): the moved spans are
 * derived, so they are complete while this file's are too. Read first then, a rollout's
 * llm_calls is planned without the SQL that derives spans, which it spent most of its time on
 * (bench/spans-dir.ts).
 */
const FLEET_DERIVED_ONLY_SCHEMA = 'fleet_derived_only';
/** The schema of the directory's llm_calls as agl's own calls alone (OWN_CALLS_SCHEMA). */
const FLEET_OWN_CALLS_SCHEMA = 'fleet_own_calls_only';

/**
 * Whether no GenAI log event is stored, for the check of each read (query.ts): the file's own,
 * moved or not (a moved one is in a file too), then the directory's files. Not genai_log_events,
 * whose glob of this server's files, to leave the moved ones out, cost each read milliseconds.
 */
const FLEET_NO_LOG_EVENTS =
  'NOT EXISTS (SELECT 1 FROM main.genai_log_events) AND NOT EXISTS (SELECT 1 FROM fleet.moved_genai_log_events)';

/** Whether every call is agl's own, the file's (OWN_CALLS_ONLY) and the directory's. */
const FLEET_OWN_CALLS_ONLY = `${OWN_CALLS_ONLY} AND NOT EXISTS (SELECT 1 FROM fleet.moved_other_calls)`;

/**
 * How a server with a span directory sets up its reads (`derivedOnly`, `logEventsChecked`,
 * `ownCallsChecked`: the file has the schema above, the directory's view moved_genai_log_events,
 * and its view moved_other_calls with the schema FLEET_OWN_CALLS_SCHEMA, which an older agl did
 * not make). DuckDB's cache of Parquet footers spares each read of the directory's files, which
 * a view of llm_calls names several times, their footers; a cached footer is read again when
 * its file changes.
 */
export const fleetReads = (
  derivedOnly: boolean,
  logEventsChecked: boolean,
  ownCallsChecked: boolean,
): ReadSettings => ({
  searchPath: FLEET_SEARCH_PATH,
  caughtUpSchema: derivedOnly ? FLEET_DERIVED_ONLY_SCHEMA : undefined,
  noLogEvents: logEventsChecked ? FLEET_NO_LOG_EVENTS : undefined,
  ownCalls: ownCallsChecked ? { schema: FLEET_OWN_CALLS_SCHEMA, condition: FLEET_OWN_CALLS_ONLY } : undefined,
  setup: 'SET parquet_metadata_cache = true',
});

/** The SQL that tells whether a file has the schema of the directory's derived-only views. */
export const HAS_FLEET_DERIVED_ONLY_SQL = `SELECT count(*) > 0 FROM duckdb_schemas() WHERE schema_name = '${FLEET_DERIVED_ONLY_SCHEMA}'`;
/** The SQL that tells whether a file has the directory's view moved_genai_log_events. */
export const HAS_FLEET_LOG_EVENTS_SQL =
  "SELECT count(*) > 0 FROM duckdb_views() WHERE schema_name = 'fleet' AND view_name = 'moved_genai_log_events'";
/** The SQL that tells whether a file has the directory's view moved_other_calls (and FLEET_OWN_CALLS_SCHEMA). */
export const HAS_FLEET_OWN_CALLS_SQL =
  "SELECT count(*) > 0 FROM duckdb_views() WHERE schema_name = 'fleet' AND view_name = 'moved_other_calls'";

/** A table's columns as its files hold them (the hive partitions' date and hour left out). */
const listOf = (columns: readonly { name: string }[]) =>
  [...columns.map((column) => column.name), 'commit_seq'].join(', ');
const SPAN_LIST = listOf(SPAN_COLUMNS);
const LOG_LIST = listOf(LOG_COLUMNS);
/** The span columns that derived rows repeat (src/sql/derived.ts, CALL_COLUMNS). */
const CALL_SPAN_LIST = 'rollout_id, attempt_id, trace_id, span_id, parent_id, name, sequence_id, start_time, end_time';

/** Same span: the keys the derived tables share with `spans`. */
const sameSpan = (a: string, b: string) => `${a}.trace_id = ${b}.trace_id AND ${a}.span_id = ${b}.span_id`;

/**
 * The rows of one move: the spans of a commit_seq range with their derived parts, by rollout
 * (then in commit order), so that a row group holds few rollouts and a read of one skips the
 * others by the row groups' min and max (MOVED_SPANS.rowGroupRows).
 */
function movedRowsSql(first: number, through: number): string {
  return `WITH moved AS (SELECT * FROM spans WHERE commit_seq BETWEEN ${first} AND ${through}),
calls AS (
  SELECT trace_id, span_id, struct_pack(${CALL_FIELDS.join(', ')}) AS derived_call FROM derived_calls c
  WHERE EXISTS (SELECT 1 FROM moved m WHERE ${sameSpan('m', 'c')})
  QUALIFY row_number() OVER (PARTITION BY trace_id, span_id) = 1
),
-- Evaluation results are read from the moved spans' events (evaluationsFrom), with their own texts.
rewards AS (
  SELECT trace_id, span_id, list(struct_pack(name, value, is_primary) ORDER BY name, value) AS derived_rewards
  FROM derived_rewards r WHERE EXISTS (SELECT 1 FROM moved m WHERE ${sameSpan('m', 'r')}) AND r.source IS DISTINCT FROM 'evaluation' GROUP BY ALL
),
agents AS (
  SELECT trace_id, span_id, any_value(agent_name) AS derived_agent
  FROM derived_agents a WHERE EXISTS (SELECT 1 FROM moved m WHERE ${sameSpan('m', 'a')}) GROUP BY ALL
),
skipped AS (SELECT DISTINCT trace_id, span_id FROM derived_skipped k WHERE EXISTS (SELECT 1 FROM moved m WHERE ${sameSpan('m', 'k')}))
SELECT s.*, c.derived_call, r.derived_rewards, a.derived_agent, k.span_id IS NOT NULL AS derived_unreadable
FROM moved s
  LEFT JOIN calls c ON ${sameSpan('s', 'c')}
  LEFT JOIN rewards r ON ${sameSpan('s', 'r')}
  LEFT JOIN agents a ON ${sameSpan('s', 'a')}
  LEFT JOIN skipped k ON ${sameSpan('s', 'k')}
ORDER BY s.rollout_id, s.commit_seq`;
}

/**
 * The next `commit_seq` of a table's rows. After a move deleted them all, the highest moved one
 * (kept with the delete) is what the numbering goes on from: a number used again would be taken
 * for a moved row.
 */
export const nextCommitSeqSql = (table: MovedTable['table']) => `SELECT greatest(
  (SELECT coalesce(max(commit_seq), -1) FROM ${table}),
  (SELECT coalesce(max(CAST(value AS BIGINT)), -1) FROM agl_meta WHERE key = '${table}_moved_through')) + 1`;

/** The last statements of a delete of moved rows: the highest one moved is kept (nextCommitSeqSql). */
const deleteThrough = (
  table: MovedTable['table'],
  through: number,
) => `DELETE FROM ${table} WHERE commit_seq <= ${through};
INSERT OR REPLACE INTO agl_meta VALUES ('${table}_moved_through', '${through}');`;

/**
 * Deletes the file's spans through `through` (moved) and their derived rows, in one transaction.
 * Derived rows of a span key that an unmoved span still has stay.
 */
function deleteMovedSpansSql(through: number): string {
  const gone = `(SELECT trace_id, span_id FROM spans WHERE commit_seq <= ${through}
    EXCEPT SELECT trace_id, span_id FROM spans WHERE commit_seq > ${through})`;
  const from = (table: string) => `DELETE FROM ${table} USING moved_keys m WHERE ${sameSpan(table, 'm')};`;
  return `BEGIN TRANSACTION;
CREATE OR REPLACE TEMP TABLE moved_keys AS ${gone};
${['derived_calls', 'derived_rewards', 'derived_agents', 'derived_skipped'].map(from).join('\n')}
${deleteThrough('spans', through)}
DROP TABLE moved_keys;
COMMIT;`;
}

/** A table a server moves to the span directory, in files `<prefix>-<first>-<last>.parquet`. */
export interface MovedTable {
  readonly table: 'spans' | 'logs';
  readonly prefix: 'part' | 'logs';
  /** The rows of one move: a commit_seq range. */
  rowsSql(first: number, through: number): string;
  /** The rows of a file's row groups (default: DuckDB's, 122,880). */
  readonly rowGroupRows?: number;
  /** Deletes the rows through a commit_seq, moved, in one transaction. */
  deleteSql(through: number): string;
}

export const MOVED_SPANS: MovedTable = {
  table: 'spans',
  prefix: 'part',
  rowsSql: movedRowsSql,
  // A rollout's spans from a file of 200,000: 76 ms in DuckDB's row groups in commit order, 23 ms in these.
  rowGroupRows: 10_240,
  deleteSql: deleteMovedSpansSql,
};

/**
 * Log records as they are, and `genai_event`, 1 for a GenAI log event (isLogEvent) and 0 for any
 * other: the directory's genai_log_events skips a file's row groups of none by its statistics
 * (an integer: DuckDB skips none by a boolean's).
 */
export const MOVED_LOGS: MovedTable = {
  table: 'logs',
  prefix: 'logs',
  rowsSql: (first, through) =>
    `SELECT *, CAST((${isLogEvent()}) IS TRUE AS TINYINT) AS genai_event FROM logs
    WHERE commit_seq BETWEEN ${first} AND ${through} ORDER BY commit_seq`,
  deleteSql: (through) => `BEGIN TRANSACTION; ${deleteThrough('logs', through)} COMMIT;`,
};

/**
 * The schema `fleet` over the directory's files (every server's: `DIR/date=/hour=/server=/*.parquet`)
 * and this file's rows of each table after the highest commit_seq that `serverId` moved of it
 * (named by its files: listed with glob(), none opened). Run on a connection of its own: it
 * switches the schema.
 */
export function fleetViewsSql(dir: string, serverId: string): string {
  const filesOf = ({ prefix }: MovedTable) =>
    `read_parquet(${sqlText(join(dir, '**', `${prefix}-*.parquet`))}, hive_partitioning = true, hive_types_autocast = false, union_by_name = true)`;
  const files = filesOf(MOVED_SPANS);
  // The server's files of a table, by name (its schema file has no range: TRY_CAST leaves it out).
  const moved = ({ prefix }: MovedTable) => {
    const own = sqlText(join(dir, '*', '*', `server=${serverId}`, `${prefix}-*.parquet`));
    return `(SELECT coalesce(max(TRY_CAST(regexp_extract(file, '-\\d+-(\\d+)\\.parquet$', 1) AS BIGINT)), -1) FROM glob(${own}))`;
  };
  // The calls' keys for the anti-joins of llm_calls (llmCallsOf), without the test for unmoved
  // spans that each read of this file's rows makes: the rows it leaves out are those of spans a
  // move put in a file and has not deleted yet, whose keys the file holds too. Planning that
  // test and the struct's other fields at three reads was about a tenth of a rollout's llm_calls.
  // A span with no call has a NULL dialect, which the anti-joins' tests of it leave out.
  const callKeys = `(SELECT trace_id, parent_id, dialect, response_id FROM main.derived_calls
  UNION ALL SELECT trace_id, parent_id, derived_call.dialect, derived_call.response_id FROM ${files})`;
  // The files an older agl moved have no genai_event: NULL, their records are tested one by one
  // (and with no such file in the directory, the column still binds).
  const taggedLogs = `(SELECT * FROM ${filesOf(MOVED_LOGS)} UNION ALL BY NAME SELECT NULL::TINYINT AS genai_event WHERE false)`;
  const local = (table: string) => `SELECT t.* FROM main.${table} t SEMI JOIN unmoved_spans u ON ${sameSpan('u', 't')}`;
  return `CREATE SCHEMA IF NOT EXISTS fleet;
USE fleet;
CREATE OR REPLACE VIEW unmoved_spans AS SELECT * FROM main.spans WHERE commit_seq > ${moved(MOVED_SPANS)};
CREATE OR REPLACE VIEW spans AS
  SELECT *, ${sqlText(serverId)} AS server FROM unmoved_spans
  UNION ALL BY NAME SELECT ${SPAN_LIST}, server FROM ${files};
CREATE OR REPLACE VIEW logs AS
  SELECT *, ${sqlText(serverId)} AS server FROM main.logs WHERE commit_seq > ${moved(MOVED_LOGS)}
  UNION ALL BY NAME SELECT ${LOG_LIST}, server FROM ${filesOf(MOVED_LOGS)};
CREATE OR REPLACE VIEW moved_genai_log_events AS
  SELECT ${LOG_LIST}, server FROM ${taggedLogs} WHERE genai_event = 1
  UNION ALL BY NAME SELECT ${LOG_LIST}, server FROM ${taggedLogs} WHERE genai_event IS NULL AND ${isLogEvent()};
CREATE OR REPLACE VIEW genai_log_events AS
  SELECT *, ${sqlText(serverId)} AS server FROM main.genai_log_events WHERE commit_seq > ${moved(MOVED_LOGS)}
  UNION ALL BY NAME SELECT * FROM moved_genai_log_events;
-- Every call has a dialect (0 to 5). IS NOT NULL on a struct field is tested after the scan, on
-- the whole struct of each row group read; a comparison is a filter of the Parquet scan itself,
-- which skips row groups by the field's statistics (llm_calls' dialect > 1: a rollout's none).
CREATE OR REPLACE VIEW derived_calls AS ${local('derived_calls')}
  UNION ALL BY NAME SELECT ${CALL_SPAN_LIST}, ${CALL_FIELDS.map((field) => `derived_call.${field} AS ${field}`).join(', ')}
  FROM ${files} WHERE derived_call.dialect >= 0;
CREATE OR REPLACE VIEW derived_rewards AS ${local('derived_rewards')}
  UNION ALL BY NAME SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, start_time AS time, unnest(reward), feedback, source
  FROM (SELECT *, unnest(derived_rewards) AS reward, ${rewardTextOf('f')} FROM ${files} f WHERE derived_rewards IS NOT NULL)
  UNION ALL BY NAME ${evaluationsFrom(files)};
CREATE OR REPLACE VIEW derived_agents AS ${local('derived_agents')}
  UNION ALL BY NAME SELECT trace_id, span_id, derived_agent AS agent_name FROM ${files} WHERE derived_agent IS NOT NULL;
-- The moved calls of other dialects than agl's own: whether there is one (FLEET_OWN_CALLS_ONLY)
-- is a look at the files' statistics.
CREATE OR REPLACE VIEW moved_other_calls AS SELECT trace_id, span_id FROM ${files} WHERE derived_call.dialect > 1;
CREATE OR REPLACE VIEW derived_skipped AS ${local('derived_skipped')}
  UNION ALL BY NAME SELECT rollout_id, trace_id, span_id FROM ${files} WHERE derived_unreadable;
CREATE OR REPLACE VIEW underived_spans AS SELECT * FROM main.underived_spans;
-- Moved calls carry no credits (the deriver credits an attempt again when its later spans come),
-- so triplets are credited when read.
CREATE OR REPLACE VIEW credited_calls_ready AS SELECT false AS ready;
${READ_VIEWS_SQL}
USE main;
${derivedOnlyViewsSql(FLEET_DERIVED_ONLY_SCHEMA, FLEET_OWN_CALLS_SCHEMA, callKeys)}`;
}
