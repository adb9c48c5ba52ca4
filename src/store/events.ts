/**
 * Queue and finish events of a LightningStore, for its long polls (a dequeue with a wait,
 * waitForRollouts): a waiter notes `count`, looks at the state, and waits for the next event
 * only if none came meanwhile, so that no event falls between its look and its wait.
 */
export class StoreEvents {
  private readonly waiters = new Set<() => void>();
  /** Events so far. */
  count = 0;

  /** An event: every waiter wakes. */
  wake(): void {
    this.count++;
    for (const waiter of this.waiters) waiter();
    this.waiters.clear();
  }

  /** Resolves at the next event, or at the deadline (ms since the epoch), or after a minute. */
  next(deadline: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, Math.max(0, Math.min(deadline, Date.now() + 60_000) - Date.now()));
      const waiters = this.waiters;
      function done() {
        clearTimeout(timer);
        waiters.delete(done);
        resolve();
      }
      waiters.add(done);
    });
  }
}

/**
 * A long poll: `take` until it takes something, `deadline` passes or `signal` aborts; between
 * tries, waits for the next event of `events` (`wait`, events.next by default) unless one came
 * meanwhile. An abort ends only a wait: a take that ran is answered.
 */
export async function takeOrWait<T>(
  events: StoreEvents,
  deadline: number,
  take: () => Promise<T[]>,
  {
    wait = (until) => events.next(until),
    signal,
  }: { wait?: (deadline: number) => Promise<void>; signal?: AbortSignal } = {},
): Promise<T[]> {
  for (;;) {
    const seen = events.count;
    const taken = await take();
    if (taken.length > 0 || Date.now() >= deadline || signal?.aborted) return taken;
    if (events.count === seen) await untilAborted(wait(deadline), signal);
  }
}

/** `waiting`, or less once `signal` aborts. */
function untilAborted(waiting: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return waiting;
  return new Promise((resolve) => {
    const done = () => {
      signal.removeEventListener('abort', done);
      resolve();
    };
    signal.addEventListener('abort', done, { once: true });
    void waiting.then(done);
  });
}
