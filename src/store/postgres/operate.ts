import { noChanges, type Changes, type RolloutState } from '../rollout-state.js';
import type { PgDatabase } from './database.js';
import { loadedOf, loadStatement, type LoadSpec } from './load.js';
import { lockWorkers, stateOf, writeChanges, type Signals } from './state-rows.js';

/** What an operation on the shared state does: the RolloutState operation of the embedded store. */
export type Operation<T> = (state: RolloutState, now: number, changes: Changes) => T;

/**
 * Runs one LightningStore operation in a transaction: the entities of `load` are locked and read
 * (with the BEGIN, one round trip), `operation` changes them on a RolloutState (the embedded
 * store's status machine), and the changes are written back in one statement before the COMMIT:
 * three round trips in all. The workers an operation touches are known only once it ran: when
 * it touched one not locked yet, their locks are taken and it runs again on fresh copies (it
 * decides the same, given the same entities). Resolves with the operation's result and what its
 * changes signal (the caller wakes the waiters of every server with it).
 */
export function operate<T>(
  db: PgDatabase,
  load: LoadSpec,
  operation: Operation<T>,
): Promise<{ value: T; signals: Signals }> {
  return db.transaction(async (tx, [opened]) => {
    const loaded = loadedOf(opened.loaded as Parameters<typeof loadedOf>[0]);
    // The workers lock_and_read locked: those asked for and those of the rollouts' attempts.
    const locked = new Set([...(load.workers ?? []), ...loaded.attempts.map((a) => a.worker_id)]);
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
      await writeChanges(tx, state, changes, now);
      return { value: structuredClone(value), signals };
    }
  }, loadStatement(load));
}
