import type { Attempt } from '../../api/types.js';
import type { ColumnarRows, Int64Column } from '../../otlp/columns.js';
import { SPAN } from '../../otlp/span-columns.js';
import type { PgDatabase } from './database.js';
import { ATTEMPT_COLUMNS, attemptKey } from './entities.js';
import { operate } from './operate.js';
import type { Signals } from './state-rows.js';

/** A heartbeat alone goes to state_log at most this often per attempt (as the embedded store writes it). */
const HEARTBEAT_LOG_SECONDS = 5;

/**
 * Raises each rollout's counter past its explicit ids, then by `counts[i]`, in one statement;
 * answers each rollout's new last id. (`step`, the size of the last reservation, is how the
 * statement gets the count to its ON CONFLICT branch.) The counter's row lock orders servers that
 * number spans of one rollout at once.
 */
async function reserve(
  db: PgDatabase,
  rollouts: string[],
  counts: number[],
  explicitMax: number[],
): Promise<Map<string, number>> {
  const rows = await db.query<{ rollout_id: string; last_id: string }>(
    `INSERT INTO agl.span_sequences AS s (rollout_id, last_id, step)
      SELECT rollout_id, explicit + n, n FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(rollout_id, n, explicit)
      ON CONFLICT (rollout_id) DO UPDATE SET last_id = greatest(s.last_id + excluded.step, excluded.last_id), step = excluded.step
      RETURNING rollout_id, last_id`,
    [rollouts, counts, explicitMax],
  );
  return new Map(rows.map((r) => [r.rollout_id, Number(r.last_id)]));
}

/** The next span sequence id of a rollout, shared by every server. */
export async function nextSequenceId(db: PgDatabase, rolloutId: string): Promise<number> {
  return (await reserve(db, [rolloutId], [1], [0])).get(rolloutId) ?? 1;
}

/**
 * Gives the spans of `rows` without a sequence id the next ids of their rollout, in start-time
 * order, and raises the counters past the explicit ids (as the embedded store numbers them).
 */
export async function assignSequenceIds(db: PgDatabase, rows: ColumnarRows): Promise<void> {
  const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
  const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
  const start = (rows.columns[SPAN.start_time] as Int64Column).values;
  const counters = new Map<string, { count: number; explicit: number }>();
  const unassigned: { row: number; rollout: string }[] = [];
  for (let i = 0; i < rows.length; i++) {
    const rollout = rollouts[i];
    if (rollout === null) continue;
    const counter = counters.get(rollout) ?? { count: 0, explicit: 0 };
    counters.set(rollout, counter);
    const explicit = sequence[i];
    if (explicit === null) {
      counter.count++;
      unassigned.push({ row: i, rollout });
    } else counter.explicit = Math.max(counter.explicit, explicit);
  }
  if (counters.size === 0) return;
  const ids = [...counters.keys()];
  const last = await reserve(
    db,
    ids,
    ids.map((id) => counters.get(id)?.count ?? 0),
    ids.map((id) => counters.get(id)?.explicit ?? 0),
  );
  const next = new Map(ids.map((id) => [id, (last.get(id) ?? 0) - (counters.get(id)?.count ?? 0) + 1]));
  unassigned.sort((a, b) => (start[a.row] < start[b.row] ? -1 : start[a.row] > start[b.row] ? 1 : 0));
  for (const { row, rollout } of unassigned) {
    const id = next.get(rollout) ?? 1;
    sequence[row] = id;
    next.set(rollout, id + 1);
  }
}

/** The distinct (rollout, attempt) pairs of span rows. */
export function attemptsOf(rows: ColumnarRows): { rollouts: string[]; attempts: string[] } {
  const rolloutIds = rows.columns[SPAN.rollout_id] as (string | null)[];
  const attemptIds = rows.columns[SPAN.attempt_id] as (string | null)[];
  const seen = new Set<string>();
  const pairs = { rollouts: [] as string[], attempts: [] as string[] };
  for (let i = 0; i < rows.length; i++) {
    const rollout = rolloutIds[i];
    const attempt = attemptIds[i];
    if (rollout === null || attempt === null || seen.has(`${rollout}/${attempt}`)) continue;
    seen.add(`${rollout}/${attempt}`);
    pairs.rollouts.push(rollout);
    pairs.attempts.push(attempt);
  }
  return pairs;
}

/**
 * Stored spans are heartbeats of their attempts (RolloutState.heartbeat). Most are of a running
 * attempt whose status stays as it is: one statement sets their time (under a share lock of the
 * rollout, so that no status change runs meanwhile) and, every few seconds per attempt, logs it.
 * The others (the first span of an attempt, one that revives it, unknown ids) take the
 * embedded store's path: rollouts locked, RolloutState.heartbeat, changes written.
 */
export async function heartbeats(
  db: PgDatabase,
  pairs: { rollouts: string[]; attempts: string[] },
): Promise<Signals | null> {
  if (pairs.rollouts.length === 0) return null;
  const now = Date.now() / 1000;
  const beaten = await db.query<Attempt & { log: boolean }>(
    `WITH beat AS (
      UPDATE agl.attempts a SET last_heartbeat_time = greatest(a.last_heartbeat_time, $3),
        heartbeat_logged = CASE WHEN $3 - coalesce(a.heartbeat_logged, 0) >= $4 THEN $3 ELSE a.heartbeat_logged END
      FROM (SELECT rollout_id, status, latest_attempt_id FROM agl.rollouts WHERE rollout_id = ANY($1)
          ORDER BY rollout_id FOR SHARE) r,
        unnest($1::text[], $2::text[]) AS h(rollout_id, attempt_id)
      WHERE a.rollout_id = h.rollout_id AND a.attempt_id = h.attempt_id AND r.rollout_id = a.rollout_id
        AND a.status NOT IN ('preparing', 'unresponsive')
        AND NOT (r.latest_attempt_id = a.attempt_id AND r.status IN ('preparing', 'queuing', 'requeuing'))
      RETURNING ${ATTEMPT_COLUMNS.split(', ')
        .map((c) => `a.${c}`)
        .join(', ')}, a.heartbeat_logged = $3 AS log
    ), logged AS (
      INSERT INTO agl.state_log (kind, key, data)
        SELECT 'attempt', rollout_id || '/' || attempt_id,
          json_build_object(${ATTEMPT_COLUMNS.split(', ')
            .map((c) => `'${c}', ${c}`)
            .join(', ')})
        FROM beat WHERE log
    )
    SELECT rollout_id, attempt_id FROM beat`,
    [pairs.rollouts, pairs.attempts, now, HEARTBEAT_LOG_SECONDS],
  );
  const done = new Set(beaten.map(attemptKey));
  const rest = pairs.rollouts
    .map((rollout, i) => ({ rollout, attempt: pairs.attempts[i] }))
    .filter((p) => !done.has(`${p.rollout}/${p.attempt}`));
  if (rest.length === 0) return null;
  const { signals } = await operate(
    db,
    { rollouts: [...new Set(rest.map((p) => p.rollout))] },
    (state, at, changes) => {
      for (const p of rest) state.heartbeat(p.rollout, p.attempt, at, changes);
    },
  );
  return signals;
}
