import { ConflictError, NotFoundError } from '../../api/errors.js';
import type { OfferedBatch, TrainingBatchSource, TrainingDone, TrainingDoneAnswer } from '../../api/training.js';
import { arrowStream, type TrainingBatch } from './arrow.js';
import type { ApplyDone, BatchHandoff } from './handoff.js';

/**
 * The HTTP hand-off: the batches a GRPO run offers, leased to trainers through the server's
 * /v1/agl/training/ routes (TrainingBatchSource). A batch handed out and not done within its
 * lease is handed out again, the same bytes; the first done of a batch ends it, a later one is
 * a conflict. Batches go out in the order they were offered. Waits are events (an offer, a lease
 * running out, a close), not polls.
 */

type State = 'ready' | 'leased' | 'ending';

interface Entry {
  readonly batch: TrainingBatch;
  readonly offered: OfferedBatch;
  state: State;
  lease?: NodeJS.Timeout;
  settle(done: TrainingDone | null): void;
}

export class BatchQueue implements TrainingBatchSource, BatchHandoff {
  private readonly entries = new Map<string, Entry>();
  /** Batches that ended (done, or withdrawn when the run stopped), by id: a done for them is a conflict. */
  private readonly ended = new Map<string, string>();
  private readonly waiters = new Set<() => void>();
  private closed = false;

  constructor(
    private readonly leaseSeconds: number,
    private readonly apply: ApplyDone,
  ) {}

  async offer(batch: TrainingBatch, signal: AbortSignal): Promise<{ done: Promise<TrainingDone | null> }> {
    const offered: OfferedBatch = {
      batchId: batch.batchId,
      step: batch.step,
      modelVersion: batch.modelVersion,
      leaseSeconds: this.leaseSeconds,
      body: arrowStream(batch),
    };
    let settle: (done: TrainingDone | null) => void = () => {};
    const done = new Promise<TrainingDone | null>((resolve) => (settle = resolve));
    const entry: Entry = { batch, offered, state: 'ready', settle };
    this.closed = false;
    this.entries.set(batch.batchId, entry);
    const withdraw = () => this.end(entry, 'withdrawn: the run stopped before the trainer said done', null);
    if (signal.aborted) withdraw();
    else signal.addEventListener('abort', withdraw, { once: true });
    void done.then(() => signal.removeEventListener('abort', withdraw));
    this.wake();
    return { done };
  }

  async next(waitSeconds: number, signal: AbortSignal): Promise<OfferedBatch | null> {
    const deadline = Date.now() + waitSeconds * 1000;
    for (;;) {
      const entry = [...this.entries.values()].find((e) => e.state === 'ready');
      if (entry) {
        this.lease(entry);
        return entry.offered;
      }
      if (this.closed || signal.aborted || Date.now() >= deadline) return null;
      await this.change(deadline - Date.now(), signal);
    }
  }

  async done(batchId: string, done: TrainingDone): Promise<TrainingDoneAnswer> {
    const entry = this.entries.get(batchId);
    if (!entry) {
      const why = this.ended.get(batchId);
      if (why) throw new ConflictError(`batch ${batchId} is ${why}`);
      throw new NotFoundError(`no training batch ${batchId}`);
    }
    if (entry.state === 'ending') throw new ConflictError(`batch ${batchId} is being ended by another done`);
    const before = entry.state;
    entry.state = 'ending';
    clearTimeout(entry.lease);
    let answer: TrainingDoneAnswer;
    try {
      answer = await this.apply(entry.batch, done);
    } catch (error) {
      // Refused: the batch stays the trainer's (or goes out again) as before.
      if (this.entries.has(batchId)) {
        if (before === 'leased') this.lease(entry);
        else this.makeReady(entry);
      }
      throw error;
    }
    this.end(entry, 'done already', done);
    return answer;
  }

  close(): void {
    this.closed = true;
    for (const entry of this.entries.values()) this.end(entry, 'withdrawn: the run ended', null);
    this.wake();
  }

  private lease(entry: Entry): void {
    entry.state = 'leased';
    clearTimeout(entry.lease);
    entry.lease = setTimeout(() => {
      if (entry.state === 'leased') this.makeReady(entry);
    }, this.leaseSeconds * 1000);
  }

  private makeReady(entry: Entry): void {
    entry.state = 'ready';
    this.wake();
  }

  /** Ends a batch for good: its rows are let go, its id remembered. */
  private end(entry: Entry, why: string, done: TrainingDone | null): void {
    if (!this.entries.delete(entry.batch.batchId)) return;
    clearTimeout(entry.lease);
    this.ended.set(entry.batch.batchId, why);
    entry.settle(done);
  }

  private wake(): void {
    for (const waiter of this.waiters) waiter();
  }

  /** Resolves at the next change of the queue, after `ms`, or when `signal` is aborted. */
  private change(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        this.waiters.delete(finish);
        signal.removeEventListener('abort', finish);
        resolve();
      };
      const timer = setTimeout(finish, ms);
      this.waiters.add(finish);
      signal.addEventListener('abort', finish, { once: true });
    });
  }
}
