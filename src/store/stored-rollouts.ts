/**
 * Reads of the rollouts that the embedded store no longer holds in memory (RolloutState.retire),
 * from `state_history`, where every change is written through. The memory's copy stays the one
 * to answer for a rollout it holds: these reads serve the rest.
 */
import { FINISHED_ROLLOUT_STATUSES, type Attempt, type Rollout, type RolloutQuery } from '../api/types.js';
import { sqlText } from '../sql/literals.js';
import { defaultConfig } from './rollout-state.js';

/** A rollout as the database holds it, with its attempts in sequence order. */
export interface StoredRollout {
  readonly rollout: Rollout;
  readonly attempts: Attempt[];
}

const list = (values: readonly string[]) => values.map(sqlText).join(', ');
/** `expr IN (values)`, false where it is NULL or the list is empty. */
const isIn = (expr: string, values: readonly string[]) =>
  values.length === 0 ? 'false' : `coalesce(${expr} IN (${list(values)}), false)`;

/**
 * The latest version of the rollouts `ids`, and of their attempts unless `attempts` is false. An
 * attempt's key is its rollout's id, a slash and its own id, which holds no slash (clientId).
 * A few ids are looked for as prefixes, more by the id cut out of each key. Over 100,000
 * rollouts' history (600,000 rows) one id takes 10 ms, 50 ids 80-100 ms: two statements, so that
 * each filter reaches its scan (one OR of both read every row's JSON: 120-150 ms).
 */
export function storedRolloutsSql(ids: readonly string[], attempts = true): string {
  const rollouts = `SELECT kind, arg_max(data, version)::VARCHAR AS data FROM state_history
    WHERE kind = 'rollout' AND key IN (${list(ids)}) GROUP BY kind, key`;
  if (!attempts) return rollouts;
  const rolloutOfKey =
    ids.length <= 64
      ? ids.map((id) => `starts_with(key, ${sqlText(`${id}/`)})`).join(' OR ')
      : `key[1:length(key) - strpos(reverse(key), '/')] IN (${list(ids)})`;
  return `${rollouts} UNION ALL SELECT kind, arg_max(data, version)::VARCHAR AS data FROM state_history
    WHERE kind = 'attempt' AND (${rolloutOfKey}) GROUP BY kind, key`;
}

/** The rollouts of `storedRolloutsSql`'s rows, by id (attempts of other rollouts a prefix matched left out). */
export function storedRollouts(rows: readonly Record<string, unknown>[]): Map<string, StoredRollout> {
  const found = new Map<string, StoredRollout>();
  const attempts: Attempt[] = [];
  for (const { kind, data } of rows) {
    const entity = JSON.parse(String(data));
    if (kind === 'rollout') found.set(entity.rollout_id, { rollout: storedRollout(entity), attempts: [] });
    else attempts.push(entity as Attempt);
  }
  for (const attempt of attempts) found.get(attempt.rollout_id)?.attempts.push(attempt);
  for (const { attempts } of found.values()) attempts.sort((a, b) => a.sequence_id - b.sequence_id);
  return found;
}

/** A rollout's JSON as written, with the config's defaults (an older agl wrote partial ones). */
export const storedRollout = (entity: Rollout): Rollout => ({ ...entity, config: defaultConfig(entity.config) });

// Each rollout's latest version; a row DuckDB cannot read as JSON (a lone surrogate) has null fields.
const LATEST_ROLLOUTS = `SELECT key, data, CASE WHEN json_valid(data) THEN data END AS j, created FROM (
    SELECT key, arg_max(data, version) AS data, min(version) AS created FROM state_history WHERE kind = 'rollout' GROUP BY key)`;

/** The SQL value a rollout query compares or sorts by: the text in-memory filtering reads. */
const FIELD_SQL: Record<string, string> = {
  rollout_id: 'key',
  start_time: `TRY_CAST(j->>'start_time' AS DOUBLE)`,
  end_time: `TRY_CAST(j->>'end_time' AS DOUBLE)`,
};
const fieldSql = (field: string) => FIELD_SQL[field] ?? `coalesce(j->>${sqlText(field)}, '')`;

/**
 * One page of `queryRollouts` over every stored rollout, and the count of all that match
 * (null without a filter: every rollout): the filters, order and paging that `paginate` applies
 * in memory (a time missing sorts as the latest, ties by creation), so that both answer alike.
 * `query` has been checked. Two statements, run side by side: a count beside each row
 * (`count(*) OVER ()`) kept every row's JSON until the sort (over 100,000 rollouts, the newest
 * 50 took 150 ms, against 107).
 */
export function rolloutPageSql(query: RolloutQuery): { page: string; total: string | null } {
  const conditions: string[] = [];
  if (query.status_in !== undefined) conditions.push(isIn(`j->>'status'`, query.status_in));
  if (query.rollout_id_in !== undefined) conditions.push(isIn('key', query.rollout_id_in));
  if (query.rollout_id_contains !== undefined) conditions.push(`contains(key, ${sqlText(query.rollout_id_contains)})`);
  if (query.mode_in !== undefined) conditions.push(isIn(`j->>'mode'`, query.mode_in));
  if (query.input_contains !== undefined)
    conditions.push(`coalesce(contains((j->'input')::VARCHAR, ${sqlText(query.input_contains)}), false)`);
  const where =
    conditions.length === 0 ? '' : `WHERE ${conditions.join(query.filter_logic === 'or' ? ' OR ' : ' AND ')}`;
  const matched = `WITH latest AS (${LATEST_ROLLOUTS}), matched AS (SELECT key, data, created, j FROM latest ${where})`;
  const desc = query.sort_order === 'desc';
  const order =
    query.sort_by === undefined || query.sort_by === null
      ? 'created'
      : `${fieldSql(query.sort_by)} ${desc ? 'DESC' : 'ASC'} NULLS ${desc ? 'FIRST' : 'LAST'}, created`;
  const limit = query.limit === undefined || query.limit === -1 ? '' : `LIMIT ${Number(query.limit)}`;
  return {
    page: `${matched} SELECT data::VARCHAR AS data FROM matched ORDER BY ${order} ${limit} OFFSET ${Number(query.offset ?? 0)}`,
    total: conditions.length === 0 ? null : `${matched} SELECT count(*)::DOUBLE AS total FROM matched`,
  };
}

/**
 * Whether a rollout query can only match rollouts held in memory: one that asks for statuses
 * none of which is finished (the queue, what runs), unless `or` lets another filter widen it.
 */
export function onlyUnfinished(query: RolloutQuery): boolean {
  const filters = ['status_in', 'rollout_id_in', 'rollout_id_contains', 'mode_in', 'input_contains'] as const;
  const others = filters.filter((f) => f !== 'status_in' && query[f] !== undefined).length;
  return (
    query.status_in !== undefined &&
    !query.status_in.some((s) => FINISHED_ROLLOUT_STATUSES.includes(s)) &&
    (query.filter_logic !== 'or' || others === 0)
  );
}
