import type { PaginatedResult, Span, SpanQuery } from '../api/types.js';
import { checkFilterLogic, paginate } from './paginate.js';
import { SPAN_JSON_COLUMNS, spanFromRow } from './span-json.js';
import { sqlText } from '../sql/literals.js';

// What both LightningStores (the embedded one, the one over PostgreSQL) answer alike: the fields
// each query may sort by, and span queries, which read the spans of this server's DuckDB file.

export const ROLLOUT_FIELDS = [
  'rollout_id',
  'input',
  'start_time',
  'end_time',
  'mode',
  'resources_id',
  'status',
  'config',
  'metadata',
];
export const ATTEMPT_FIELDS = [
  'rollout_id',
  'attempt_id',
  'sequence_id',
  'start_time',
  'end_time',
  'status',
  'worker_id',
  'last_heartbeat_time',
  'metadata',
];
export const RESOURCES_FIELDS = ['resources_id', 'version', 'create_time', 'update_time', 'resources'];
const SPAN_FIELDS = [
  'rollout_id',
  'attempt_id',
  'sequence_id',
  'trace_id',
  'span_id',
  'parent_id',
  'name',
  'start_time',
  'end_time',
];
export const WORKER_FIELDS = [
  'worker_id',
  'status',
  'heartbeat_stats',
  'last_heartbeat_time',
  'last_dequeue_time',
  'last_busy_time',
  'last_idle_time',
  'current_rollout_id',
  'current_attempt_id',
];

/**
 * The spans a SpanQuery matches, paged. `latestAttemptId` answers attempt_id 'latest'; `read`
 * runs the SQL on the spans table.
 */
export async function querySpanPage(
  query: SpanQuery,
  latestAttemptId: (rolloutId: string) => Promise<string | null>,
  read: (sql: string) => Promise<Record<string, unknown>[]>,
): Promise<PaginatedResult<Span>> {
  let attemptId = query.attempt_id ?? null;
  if (attemptId === 'latest') {
    attemptId = await latestAttemptId(query.rollout_id);
    if (attemptId === null) return paginate([], query, SPAN_FIELDS);
  }
  const required = [
    `rollout_id = ${sqlText(query.rollout_id)}`,
    ...(attemptId === null ? [] : [`attempt_id = ${sqlText(attemptId)}`]),
  ];
  const optional: string[] = [];
  for (const field of ['trace_id', 'span_id', 'parent_id', 'name'] as const) {
    const exact = query[field];
    const contains = query[`${field}_contains`];
    if (exact !== undefined) optional.push(`${field} = ${sqlText(exact)}`);
    if (contains !== undefined) optional.push(`contains(${field}, ${sqlText(contains)})`);
  }
  checkFilterLogic(query.filter_logic);
  const filter = optional.length === 0 ? '' : ` AND (${optional.join(query.filter_logic === 'or' ? ' OR ' : ' AND ')})`;
  const rows = await read(
    `SELECT ${SPAN_JSON_COLUMNS} FROM spans WHERE ${required.join(' AND ')}${filter} ORDER BY sequence_id`,
  );
  return paginate(rows.map(spanFromRow), { sort_by: 'sequence_id', ...query }, SPAN_FIELDS);
}
