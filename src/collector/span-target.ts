import { ownCallsOnlySql, type SpanKeys, spanKeysCondition } from '../sql/derived.js';
import { llmCallsOfKeys } from '../sql/views.js';
import type { DuckDBStore } from '../store/store.js';

/**
 * Where a span that agl writes beside an agent's own goes (a feedback): a sibling of the call it
 * is credited to (same parent, trace and rollout), so that the `rewards` view, triplet credit and
 * the final-reward filters give it to that call.
 */
export interface Target {
  readonly trace_id: string;
  readonly span_id: string | null;
  readonly parent_id: string | null;
  readonly rollout_id: string | null;
  readonly attempt_id: string | null;
  /** The target's end in nanoseconds: a feedback is dated there, so credit gives it to that call. */
  readonly end_ns: bigint;
}

type TargetStore = Pick<DuckDBStore, 'query'>;

export const TARGET_COLUMNS = 'trace_id, span_id, parent_id, rollout_id, attempt_id, epoch_ns(end_time) AS end_ns';

/** The rows of an internal query (agl's own SQL, not a user's: no guard). */
export async function rows(store: TargetStore, sql: string): Promise<Record<string, unknown>[]> {
  return (await store.query(sql, { guard: false })).rows;
}

export const nowNs = () => BigInt(Date.now()) * 1_000_000n;

export const targetOf = (row: Record<string, unknown>): Target => ({
  trace_id: String(row.trace_id),
  span_id: String(row.span_id),
  parent_id: (row.parent_id as string | null) ?? null,
  rollout_id: (row.rollout_id as string | null) ?? null,
  attempt_id: (row.attempt_id as string | null) ?? null,
  end_ns: row.end_ns === null || row.end_ns === undefined ? nowNs() : BigInt(String(row.end_ns)),
});

/**
 * The SQL of the `llm_calls` rows of the spans that `keys` select (llmCallsOfKeys), planned for
 * agl's own calls alone when those spans hold no other (ownCallsOnlySql). The check is a read of
 * its own: a call of another dialect stored between the two is left out, as one stored after
 * both would be.
 */
export async function llmCallsSqlOfKeys(store: TargetStore, keys: SpanKeys): Promise<string> {
  const [check] = await rows(store, ownCallsOnlySql(keys));
  return llmCallsOfKeys(keys, check?.own_only === true);
}

/**
 * The last call (a row of `llm_calls`, whichever instrumentation recorded it) among the spans that
 * `keys` select, else the last span to end; undefined when none matches.
 */
export async function lastTargetOf(store: TargetStore, keys: SpanKeys): Promise<Target | undefined> {
  const order = 'ORDER BY end_time DESC NULLS LAST, sequence_id DESC NULLS LAST, span_id DESC LIMIT 1';
  const [call] = await rows(store, `SELECT ${TARGET_COLUMNS} FROM (${await llmCallsSqlOfKeys(store, keys)}) ${order}`);
  if (call) return targetOf(call);
  const [span] = await rows(store, `SELECT ${TARGET_COLUMNS} FROM spans WHERE ${spanKeysCondition(keys)} ${order}`);
  return span ? targetOf(span) : undefined;
}
