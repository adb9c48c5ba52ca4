import type { ColumnarRows } from '../../otlp/columns.js';
import { SPAN } from '../../otlp/span-columns.js';
import { unnumberedSpans } from '../sequence-ids.js';
import type { PgDatabase } from './database.js';
import { ATTEMPT_COLUMNS } from './entities.js';
import { operate } from './operate.js';
import type { Signals } from './state-rows.js';

/** A heartbeat alone goes to state_log at most this often per attempt (as the embedded store writes it). */
const HEARTBEAT_LOG_SECONDS = 5;

/**
 * Raises each rollout's counter ($1) past its explicit ids ($3), then by its count ($2), and
 * answers its new last id. (`step`, the size of the last reservation, is how the count reaches
 * the ON CONFLICT branch.) The counter's row lock orders servers that number spans of one
 * rollout at once.
 */
const RESERVE = `INSERT INTO agl.span_sequences AS s (rollout_id, last_id, step)
  SELECT rollout_id, explicit + n, n FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(rollout_id, n, explicit)
  ON CONFLICT (rollout_id) DO UPDATE SET last_id = greatest(s.last_id + excluded.step, excluded.last_id), step = excluded.step
  RETURNING rollout_id, last_id`;

/**
 * A span is a heartbeat of its attempt (RolloutState.heartbeat). Most are of a running attempt
 * whose status stays as it is: this sets their time ($4: rollouts, $5: attempts, $6: now), under
 * a share lock of the rollout, so that no status change runs meanwhile, and every few seconds
 * ($7) per attempt logs it. It answers the attempts it took.
 */
const BEAT = `UPDATE agl.attempts a SET last_heartbeat_time = greatest(a.last_heartbeat_time, $6::float8),
    heartbeat_logged = CASE WHEN $6 - coalesce(a.heartbeat_logged, 0) >= $7::float8 THEN $6 ELSE a.heartbeat_logged END
  FROM (SELECT rollout_id, status, latest_attempt_id FROM agl.rollouts WHERE rollout_id = ANY($4::text[])
      ORDER BY rollout_id FOR SHARE) r,
    unnest($4::text[], $5::text[]) AS h(rollout_id, attempt_id)
  WHERE a.rollout_id = h.rollout_id AND a.attempt_id = h.attempt_id AND r.rollout_id = a.rollout_id
    AND a.status NOT IN ('preparing', 'unresponsive')
    AND NOT (r.latest_attempt_id = a.attempt_id AND r.status IN ('preparing', 'queuing', 'requeuing'))
  RETURNING ${ATTEMPT_COLUMNS.split(', ')
    .map((c) => `a.${c}`)
    .join(', ')}, a.heartbeat_logged = $6 AS log`;

/** Both, and the log rows of the heartbeats due, in one statement (one round trip, one commit per span request). */
const ARRIVE = `WITH seq AS (${RESERVE}), beat AS (${BEAT}), logged AS (
    INSERT INTO agl.state_log (kind, key, data)
    SELECT 'attempt', rollout_id || '/' || attempt_id,
      json_build_object(${ATTEMPT_COLUMNS.split(', ')
        .map((c) => `'${c}', ${c}`)
        .join(', ')})
    FROM beat WHERE log)
  SELECT rollout_id, NULL AS attempt_id, last_id FROM seq
  UNION ALL SELECT rollout_id, attempt_id, NULL FROM beat`;

/** The next span sequence id of a rollout, shared by every server. */
export async function nextSequenceId(db: PgDatabase, rolloutId: string): Promise<number> {
  const [row] = await db.query<{ last_id: string }>(RESERVE, [[rolloutId], [1], [0]]);
  return Number(row.last_id);
}

/**
 * The counters batches of span rows need: per rollout, spans without an id and the highest
 * explicit id. Rollouts in sorted order: statements of two servers lock their counters in the
 * same order, and cannot deadlock.
 */
function countersOf(batches: readonly ColumnarRows[]): Map<string, { count: number; explicit: number }> {
  const counters = new Map<string, { count: number; explicit: number }>();
  for (const rows of batches) {
    const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
    const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
    for (let i = 0; i < rows.length; i++) {
      const rollout = rollouts[i];
      if (rollout === null) continue;
      const counter = counters.get(rollout) ?? { count: 0, explicit: 0 };
      counters.set(rollout, counter);
      const explicit = sequence[i];
      if (explicit === null) counter.count++;
      else counter.explicit = Math.max(counter.explicit, explicit);
    }
  }
  return new Map([...counters].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Gives the spans without a sequence id the ids after `last - count` of their rollout, in
 * start-time order (as the embedded store numbers them).
 */
function numberSpans(rows: ColumnarRows, first: Map<string, number>): void {
  const sequence = rows.columns[SPAN.sequence_id] as (number | null)[];
  for (const { row, rollout } of unnumberedSpans(rows)) {
    const id = first.get(rollout) ?? 1;
    sequence[row] = id;
    first.set(rollout, id + 1);
  }
}

/** The distinct (rollout, attempt) pairs of batches of span rows. */
function attemptsOf(batches: readonly ColumnarRows[]): { rollouts: string[]; attempts: string[] } {
  const seen = new Set<string>();
  const pairs = { rollouts: [] as string[], attempts: [] as string[] };
  for (const rows of batches) {
    const rolloutIds = rows.columns[SPAN.rollout_id] as (string | null)[];
    const attemptIds = rows.columns[SPAN.attempt_id] as (string | null)[];
    for (let i = 0; i < rows.length; i++) {
      const rollout = rolloutIds[i];
      const attempt = attemptIds[i];
      if (rollout === null || attempt === null || seen.has(`${rollout}/${attempt}`)) continue;
      seen.add(`${rollout}/${attempt}`);
      pairs.rollouts.push(rollout);
      pairs.attempts.push(attempt);
    }
  }
  return pairs;
}

/**
 * Batches of span rows about to be stored (the span requests of a group: SpanArrivals): those
 * without a sequence id get the next ids of their rollout from the shared counters, batch after
 * batch, and each span is a heartbeat of its attempt, in one statement. The heartbeats that
 * change a status (the first span of an attempt, one that revives it) and those of unknown
 * attempts then take the embedded store's path: rollouts locked, RolloutState.heartbeat, changes
 * written. Answers what those changes signal.
 */
async function spansArriving(db: PgDatabase, batches: readonly ColumnarRows[]): Promise<Signals | null> {
  const counters = countersOf(batches);
  if (counters.size === 0) return null;
  const ids = [...counters.keys()];
  const pairs = attemptsOf(batches);
  const answered = await db.query<{ rollout_id: string; attempt_id: string | null; last_id: string | null }>(ARRIVE, [
    ids,
    ids.map((id) => counters.get(id)?.count ?? 0),
    ids.map((id) => counters.get(id)?.explicit ?? 0),
    pairs.rollouts,
    pairs.attempts,
    Date.now() / 1000,
    HEARTBEAT_LOG_SECONDS,
  ]);
  const first = new Map<string, number>();
  const beaten = new Set<string>();
  for (const row of answered) {
    if (row.attempt_id !== null) beaten.add(`${row.rollout_id}/${row.attempt_id}`);
    else first.set(row.rollout_id, Number(row.last_id) - (counters.get(row.rollout_id)?.count ?? 0) + 1);
  }
  for (const rows of batches) numberSpans(rows, first);
  const rest = pairs.rollouts
    .map((rollout, i) => ({ rollout, attempt: pairs.attempts[i] }))
    .filter((p) => !beaten.has(`${p.rollout}/${p.attempt}`));
  if (rest.length === 0) return null;
  const { signals } = await operate(
    db,
    { rollouts: [...new Set(rest.map((p) => p.rollout))] },
    (state, now, changes) => {
      for (const p of rest) state.heartbeat(p.rollout, p.attempt, now, changes);
    },
  );
  return signals;
}

interface Arrival {
  readonly rows: ColumnarRows;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The span requests of one server, numbered and heartbeaten in groups: while a group's statement
 * runs, the requests that arrive wait and go together in the next one (one round trip and one
 * commit per group, as the DuckDB writer commits spans). One statement per request was most of
 * PostgreSQL's work per rollout. A failure fails its group; each request's client retries.
 */
export class SpanArrivals {
  private waiting: Arrival[] = [];
  private draining = false;

  constructor(
    private readonly db: PgDatabase,
    private readonly signal: (signals: Signals | null) => void,
  ) {}

  /** Numbers the rows' spans and beats their attempts; resolves once PostgreSQL committed it. */
  arrive(rows: ColumnarRows): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ rows, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    while (this.waiting.length > 0) {
      const group = this.waiting.splice(0);
      try {
        this.signal(
          await spansArriving(
            this.db,
            group.map((arrival) => arrival.rows),
          ),
        );
        for (const arrival of group) arrival.resolve();
      } catch (error) {
        for (const arrival of group) arrival.reject(error);
      }
    }
    this.draining = false;
  }
}
