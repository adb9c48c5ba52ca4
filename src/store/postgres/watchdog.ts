import type { PgDatabase } from './database.js';
import { operate } from './operate.js';
import type { Signals } from './state-rows.js';

/**
 * Active rollouts whose latest attempt ran past its timeout or was silent past
 * unresponsive_seconds (the conditions of RolloutState.watchdog), read without a lock: most rounds
 * find none and cost this one statement. Silence counts from PostgreSQL's start at the earliest
 * (`since`): while it was down no heartbeat could arrive, and a runner that waited out the outage
 * gets a whole unresponsive_seconds after it to be heard again.
 */
const OVERDUE = `WITH up AS (SELECT extract(epoch FROM pg_postmaster_start_time())::float8 AS since)
  SELECT r.rollout_id, up.since FROM up, agl.rollouts r
  JOIN agl.attempts a ON a.rollout_id = r.rollout_id AND a.attempt_id = r.latest_attempt_id
  WHERE r.status IN ('preparing', 'running') AND a.status IN ('preparing', 'running')
    AND ((r.config->>'timeout_seconds')::float8 < $1 - a.start_time
      OR (r.config->>'unresponsive_seconds')::float8 < $1 - greatest(coalesce(a.last_heartbeat_time, a.start_time), up.since))`;

/**
 * One round of the watchdog, which every server runs: overdue attempts are marked timeout or
 * unresponsive (and their rollouts requeued or failed) by RolloutState.watchdog, on the rows
 * locked and read again in the round's transaction, so a round never acts on what another
 * round already changed. Rounds of all servers take turns (an advisory lock): each locks several
 * workers, and two at once could wait on each other. Rollouts another transaction holds are
 * left to the next round. Returns the signals its changes sent (null: nothing was overdue).
 */
export async function watchdogRound(db: PgDatabase): Promise<Signals | null> {
  const overdue = await db.query<{ rollout_id: string; since: number }>(OVERDUE, [Date.now() / 1000]);
  if (overdue.length === 0) return null;
  const heardSince = overdue[0].since;
  const { signals } = await operate(
    db,
    { watchdog: true, rollouts: overdue.map((r) => r.rollout_id), skipLocked: true },
    (state, now, changes) => state.watchdog(now, changes, heardSince),
  );
  return signals;
}
