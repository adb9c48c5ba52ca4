// The errors of the LightningStore contract. Every store (embedded, REST client) throws these, the
// REST routes map them to status codes, and callers tell them apart without loading a database.

/** An id, rollout or attempt, that the store does not know (REST: 404). */
export class NotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotFoundError';
  }
}

/** A query parameter or request field the caller got wrong; the message names it (REST: 400). */
export class InvalidQueryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidQueryError';
  }
}

/** A change to something that is past taking it: a training batch already done (REST: 409). */
export class ConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConflictError';
  }
}

/** The write queue is over its bound: the caller should retry later (HTTP 503 + Retry-After). */
export class StoreBusyError extends Error {
  constructor(
    readonly retryAfterSeconds: number,
    reason = "the store's write queue is full",
  ) {
    super(`${reason}; retry in ${retryAfterSeconds} s`);
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
