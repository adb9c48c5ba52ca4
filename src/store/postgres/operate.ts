import { noChanges, type Changes, type RolloutState } from '../rollout-state.js';
import type { PgDatabase, Sql } from './database.js';
import { lockWorkers, stateOf, writeChanges, type Loaded, type Signals } from './state-rows.js';

/** What an operation on the shared state does: the RolloutState operation of the embedded store. */
export type Operation<T> = (state: RolloutState, now: number, changes: Changes) => T;

/**
 * Runs one LightningStore operation in a transaction: `load` locks and reads the entities it
 * works on, `operation` changes them on a RolloutState (the embedded store's status machine), and
 * the changes are written back before the COMMIT. The workers an operation touches are known
 * only once it ran: when it touched one not locked yet, their locks are taken and it runs again
 * on fresh copies (it decides the same, given the same entities). Resolves with the operation's
 * result and the signals its changes sent (the caller wakes its own waiters with them).
 */
export function operate<T>(
  db: PgDatabase,
  load: (tx: Sql) => Promise<Loaded>,
  operation: Operation<T>,
): Promise<{ value: T; signals: Signals }> {
  return db.transaction(async (tx) => {
    const loaded = await load(tx);
    const locked = new Set<string>();
    for (;;) {
      const signals: Signals = { queued: false, finished: false };
      const state = stateOf(loaded, signals);
      const changes = noChanges();
      const now = Date.now() / 1000;
      const value = operation(state, now, changes);
      const unlocked = [...changes.workers].map((w) => w.worker_id).filter((id) => !locked.has(id));
      if (unlocked.length > 0) {
        loaded.workers.push(...(await lockWorkers(tx, unlocked)));
        for (const id of unlocked) locked.add(id);
        continue;
      }
      await writeChanges(tx, state, changes, signals, now);
      return { value: structuredClone(value), signals };
    }
  });
}
