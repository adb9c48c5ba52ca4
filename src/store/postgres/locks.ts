/**
 * Advisory lock classes of the shared state (the first key of pg_advisory_xact_lock(int, int)):
 * "agl" and a number. Taken in this order within a transaction, after rollout row locks.
 */
export const LOCKS = { migrate: 0x61676c00, watchdog: 0x61676c01, worker: 0x61676c02, resources: 0x61676c03 };
