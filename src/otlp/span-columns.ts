import type { Column } from './columns.js';

/**
 * The tables OTLP data lands in. Column order is the order of a batch's columns (the builders
 * of batch.ts, the appenders) and of the tables; the SQL names are a public contract
 * (docs/sql.md, `spans` and `logs`).
 */
export const SPAN_COLUMNS = [
  { name: 'rollout_id', type: 'VARCHAR', js: true },
  { name: 'attempt_id', type: 'VARCHAR', js: true },
  { name: 'sequence_id', type: 'BIGINT' },
  { name: 'trace_id', type: 'VARCHAR', notNull: true, js: true },
  { name: 'span_id', type: 'VARCHAR', notNull: true, js: true },
  { name: 'parent_id', type: 'VARCHAR' },
  { name: 'name', type: 'VARCHAR', notNull: true },
  { name: 'kind', type: 'VARCHAR', notNull: true },
  { name: 'start_time', type: 'TIMESTAMP_NS' },
  { name: 'end_time', type: 'TIMESTAMP_NS' },
  { name: 'status_code', type: 'VARCHAR', notNull: true },
  { name: 'status_message', type: 'VARCHAR' },
  { name: 'attributes', type: 'JSON', notNull: true },
  { name: 'events', type: 'JSON', notNull: true },
  { name: 'links', type: 'JSON', notNull: true },
  { name: 'resource', type: 'JSON', notNull: true },
  { name: 'scope_name', type: 'VARCHAR' },
  { name: 'scope_version', type: 'VARCHAR' },
  { name: 'service_name', type: 'VARCHAR' },
  { name: 'trace_state', type: 'VARCHAR' },
  { name: 'flags', type: 'INTEGER' },
] as const satisfies readonly Column[];

export const LOG_COLUMNS = [
  { name: 'rollout_id', type: 'VARCHAR' },
  { name: 'attempt_id', type: 'VARCHAR' },
  { name: 'time', type: 'TIMESTAMP_NS' },
  { name: 'observed_time', type: 'TIMESTAMP_NS' },
  { name: 'trace_id', type: 'VARCHAR', js: true },
  { name: 'span_id', type: 'VARCHAR', js: true },
  { name: 'severity_number', type: 'INTEGER' },
  { name: 'severity_text', type: 'VARCHAR' },
  { name: 'event_name', type: 'VARCHAR' },
  { name: 'body', type: 'JSON' },
  { name: 'attributes', type: 'JSON', notNull: true },
  { name: 'resource', type: 'JSON', notNull: true },
  { name: 'scope_name', type: 'VARCHAR' },
  { name: 'scope_version', type: 'VARCHAR' },
  { name: 'service_name', type: 'VARCHAR' },
  { name: 'flags', type: 'INTEGER' },
] as const satisfies readonly Column[];

type ColumnIndex<C extends readonly Column[]> = { [K in C[number]['name']]: number };

function indexOf<C extends readonly Column[]>(columns: C): ColumnIndex<C> {
  return Object.fromEntries(columns.map((c, i) => [c.name, i])) as ColumnIndex<C>;
}

/** Position of each column in a row batch, by SQL name. */
export const SPAN = indexOf(SPAN_COLUMNS);
export const LOG = indexOf(LOG_COLUMNS);
