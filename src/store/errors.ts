// The store's errors that callers act on (a 503 + Retry-After), in a module of their own: the
// runner tells them apart without loading the database.

/** The write queue is over its bound: the caller should retry later (HTTP 503 + Retry-After). */
export class StoreBusyError extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(`the store's write queue is full; retry in ${retryAfterSeconds} s`);
    this.name = 'StoreBusyError';
  }
}

/**
 * The database cannot write now (its disk is full, an I/O error): the caller should retry later
 * (HTTP 503 + Retry-After); nothing of the failed write was stored.
 */
export class StoreUnavailableError extends Error {
  constructor(
    readonly reason: string,
    /** DuckDB invalidated the database: it must be opened again before it writes. */
    readonly invalidated = false,
    readonly retryAfterSeconds = 5,
  ) {
    super(`the store cannot write now (${reason}); retry in ${retryAfterSeconds} s`);
    this.name = 'StoreUnavailableError';
  }
}
