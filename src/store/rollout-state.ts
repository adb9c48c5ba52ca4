import { randomBytes } from 'node:crypto';
import {
  FINISHED_ROLLOUT_STATUSES,
  type Attempt,
  type AttemptedRollout,
  type AttemptStatus,
  type AttemptUpdate,
  type NamedResources,
  type ResourcesUpdate,
  type Rollout,
  type RolloutConfig,
  type RolloutConfigRequest,
  type RolloutRequest,
  type RolloutStatus,
  type RolloutUpdate,
  type Worker,
} from '../api/types.js';
import { ConflictError, NotFoundError } from '../api/errors.js';

const newId = (prefix: string, hexDigits: number) =>
  `${prefix}${randomBytes(Math.ceil(hexDigits / 2))
    .toString('hex')
    .slice(0, hexDigits)}`;

/** Entities changed by an operation, to be written through to the database. */
export interface Changes {
  readonly rollouts: Set<Rollout>;
  readonly attempts: Set<Attempt>;
  readonly resources: Set<ResourcesUpdate>;
  readonly workers: Set<Worker>;
  /** Attempts whose heartbeat is not written: its time is set once its spans are (`heartbeat`). */
  readonly heartbeats: Set<Attempt>;
  /** Rollouts made with an id of the store's: no span can name them yet. */
  readonly freshRolloutIds: Set<string>;
}

export const noChanges = (): Changes => ({
  rollouts: new Set(),
  attempts: new Set(),
  resources: new Set(),
  workers: new Set(),
  heartbeats: new Set(),
  freshRolloutIds: new Set(),
});

/** Whether an operation changed the state (heartbeats not written wait for their write). */
export const changedAnything = (c: Changes): boolean =>
  c.rollouts.size + c.attempts.size + c.resources.size + c.workers.size > 0;

const QUEUED: readonly RolloutStatus[] = ['queuing', 'requeuing'];
const HEARTBEAT_PERSIST_SECONDS = 5;
const ACTIVE: readonly RolloutStatus[] = ['preparing', 'running'];
const ENDING_ATTEMPT: readonly AttemptStatus[] = ['succeeded', 'failed', 'cancelled'];
/** Attempt statuses the watchdog and heartbeats still act on: their rollout stays in memory. */
const LIVE_ATTEMPT: readonly AttemptStatus[] = ['preparing', 'running'];

export function defaultConfig(config?: RolloutConfigRequest | null): RolloutConfig {
  return {
    timeout_seconds: config?.timeout_seconds ?? null,
    unresponsive_seconds: config?.unresponsive_seconds ?? null,
    max_attempts: config?.max_attempts ?? 1,
    retry_condition: [...(config?.retry_condition ?? [])],
  };
}

/**
 * The rollout queue, attempts, resources and workers as they are now, with Agent Lightning's
 * status machine. Pure in-memory logic: every operation records what it changed in `changes`,
 * and the store writes those through to DuckDB in the same group commit as the request's data.
 * An operation that throws NotFoundError has changed nothing.
 */
export class RolloutState {
  readonly rollouts = new Map<string, Rollout>();
  /** Attempts of each rollout, in sequence order. */
  readonly attempts = new Map<string, Attempt[]>();
  readonly resources = new Map<string, ResourcesUpdate>();
  readonly workers = new Map<string, Worker>();
  /** FIFO of rollout ids; an id whose rollout left the queuing statuses is skipped at dequeue. */
  private queue: string[] = [];
  private queueHead = 0;
  private readonly queued = new Set<string>();
  /** Called when a rollout reaches a finished status (wakes waitForRollouts). */
  onFinished: (rollout: Rollout) => void = () => {};
  /** When each attempt's heartbeat was last written through. */
  private readonly persistedHeartbeats = new WeakMap<Attempt, number>();
  /** Finished rollouts held here, the one that finished longest ago first (`retire`). */
  private readonly finished = new Set<string>();
  /**
   * Finished rollouts, and their attempts, that only the database holds (`retire`), and the
   * latest start and end among those rollouts (a missing one counts as the latest, as sorts
   * take it).
   */
  readonly retired = {
    rollouts: 0,
    attempts: 0,
    newestStart: Number.NEGATIVE_INFINITY,
    latestEnd: Number.NEGATIVE_INFINITY,
  };
  /** Called when a rollout joins the queue (wakes waiting dequeues). */
  onQueued: () => void = () => {};

  /** Forgets everything, before the state is loaded again from the database. */
  clear(): void {
    this.rollouts.clear();
    this.attempts.clear();
    this.resources.clear();
    this.workers.clear();
    this.queue = [];
    this.queueHead = 0;
    this.queued.clear();
    this.finished.clear();
    this.retired.rollouts = 0;
    this.retired.attempts = 0;
    this.retired.newestStart = Number.NEGATIVE_INFINITY;
    this.retired.latestEnd = Number.NEGATIVE_INFINITY;
  }

  /** Finished rollouts held in memory. */
  get finishedHeld(): number {
    return this.finished.size;
  }

  /**
   * Lets go of the finished rollouts, and their attempts, that finished longest ago, beyond the
   * `keep` latest: the database holds them (every change is written through), and a server
   * that ran for days would otherwise hold every rollout it ever ran (900 bytes of heap each, and
   * the watchdog's scan). Rollouts whose latest attempt still runs stay: heartbeats and the
   * watchdog act on it. The store reads what it let go from the database, and takes a rollout
   * back (`restore`) before changing it.
   */
  retire(keep: number): void {
    for (let looked = this.finished.size - keep; looked > 0 && this.finished.size > keep; looked--) {
      const [id] = this.finished;
      this.finished.delete(id);
      const rollout = this.rollouts.get(id);
      if (!rollout || !FINISHED_ROLLOUT_STATUSES.includes(rollout.status)) continue;
      const attempts = this.attempts.get(id) ?? [];
      if (LIVE_ATTEMPT.includes(attempts.at(-1)?.status ?? 'succeeded')) {
        this.finished.add(id); // looked at again once the others have gone
        continue;
      }
      this.rollouts.delete(id);
      this.attempts.delete(id);
      this.retired.rollouts++;
      this.retired.attempts += attempts.length;
      this.retired.newestStart = Math.max(this.retired.newestStart, rollout.start_time ?? Number.POSITIVE_INFINITY);
      this.retired.latestEnd = Math.max(this.retired.latestEnd, rollout.end_time ?? Number.POSITIVE_INFINITY);
    }
  }

  /** Holds a rollout that `retire` let go again, as the database has it, with its attempts. */
  restore(rollout: Rollout, attempts: readonly Attempt[]): void {
    if (this.rollouts.has(rollout.rollout_id)) return;
    this.hold(rollout, attempts);
    this.retired.rollouts--;
    this.retired.attempts -= attempts.length;
  }

  /** Holds a rollout loaded from the database (storedRollout), with its attempts in any order. */
  hold(rollout: Rollout, attempts: readonly Attempt[]): void {
    this.rollouts.set(rollout.rollout_id, rollout);
    if (attempts.length > 0)
      this.attempts.set(
        rollout.rollout_id,
        [...attempts].sort((a, b) => a.sequence_id - b.sequence_id),
      );
    if (FINISHED_ROLLOUT_STATUSES.includes(rollout.status)) this.finished.add(rollout.rollout_id);
  }

  /**
   * Rebuilds the queue after loading rollouts from the database, in the order they joined it
   * (`rolloutIds`); queued rollouts missing there follow in creation order.
   */
  restoreQueue(rolloutIds: readonly string[]): void {
    for (const id of [...rolloutIds, ...this.rollouts.keys()]) {
      const rollout = this.rollouts.get(id);
      if (rollout && QUEUED.includes(rollout.status)) this.pushQueue(id);
    }
  }

  /** The resources updated last, or null when there are none. */
  latestResources(): ResourcesUpdate | null {
    let latest: ResourcesUpdate | null = null;
    for (const r of this.resources.values()) if (latest === null || r.update_time >= latest.update_time) latest = r;
    return latest;
  }

  latestResourcesId(): string | null {
    return this.latestResources()?.resources_id ?? null;
  }

  /** Queues new rollouts; a request naming a rollout that exists answers it as it is (a retried enqueue). */
  enqueue(requests: readonly RolloutRequest[], now: number, changes: Changes): Rollout[] {
    const resourcesId = this.latestResourcesId();
    return requests.map((request) => {
      const existing = request.rollout_id ? this.rollouts.get(request.rollout_id) : undefined;
      if (existing) return existing;
      const rollout = this.createRollout(request, 'queuing', resourcesId, now, changes);
      this.pushQueue(rollout.rollout_id);
      return rollout;
    });
  }

  dequeue(limit: number, workerId: string | null, now: number, changes: Changes): AttemptedRollout[] {
    const taken: AttemptedRollout[] = [];
    while (taken.length < limit && this.queueHead < this.queue.length) {
      const id = this.queue[this.queueHead++];
      this.queued.delete(id);
      const rollout = this.rollouts.get(id);
      if (!rollout || !QUEUED.includes(rollout.status)) continue;
      const attempt = this.createAttempt(rollout, workerId, now, changes);
      this.setRolloutStatus(rollout, 'preparing', now, changes);
      taken.push({ ...rollout, attempt });
    }
    this.compactQueue();
    if (workerId !== null) {
      const last = taken.at(-1)?.attempt;
      if (last) this.syncWorker(workerId, last, now, changes, true);
      else this.workerIdle(workerId, now, changes);
    }
    return taken;
  }

  startRollout(request: RolloutRequest, workerId: string | null, now: number, changes: Changes): AttemptedRollout {
    if (request.rollout_id && this.rollouts.has(request.rollout_id))
      throw new ConflictError(`rollout ${request.rollout_id} exists already`);
    const rollout = this.createRollout(request, 'preparing', this.latestResourcesId(), now, changes);
    const attempt = this.createAttempt(rollout, workerId, now, changes);
    if (workerId !== null) this.syncWorker(workerId, attempt, now, changes, false);
    return { ...rollout, attempt };
  }

  startAttempt(
    rolloutId: string,
    workerId: string | null,
    now: number,
    changes: Changes,
    attemptId?: string | null,
  ): AttemptedRollout {
    const rollout = this.rollout(rolloutId);
    if (attemptId && this.attempts.get(rolloutId)?.some((a) => a.attempt_id === attemptId))
      throw new ConflictError(`rollout ${rolloutId} has an attempt ${attemptId} already`);
    const attempt = this.createAttempt(rollout, workerId, now, changes, attemptId);
    this.setRolloutStatus(rollout, 'preparing', now, changes);
    if (workerId !== null) this.syncWorker(workerId, attempt, now, changes, false);
    return { ...rollout, attempt };
  }

  updateRollout(rolloutId: string, update: RolloutUpdate, now: number, changes: Changes): Rollout {
    const rollout = this.rollout(rolloutId);
    if ('input' in update) rollout.input = update.input;
    if ('mode' in update) rollout.mode = update.mode ?? null;
    if ('resources_id' in update) rollout.resources_id = update.resources_id ?? null;
    if ('metadata' in update) rollout.metadata = update.metadata ?? null;
    if (update.config !== undefined) rollout.config = defaultConfig(update.config);
    changes.rollouts.add(rollout);
    if (update.status !== undefined) this.setRolloutStatus(rollout, update.status, now, changes);
    return rollout;
  }

  updateAttempt(rolloutId: string, attemptId: string, update: AttemptUpdate, now: number, changes: Changes): Attempt {
    const rollout = this.rollout(rolloutId);
    const attempts = this.attempts.get(rolloutId) ?? [];
    if (attempts.length === 0) throw new NotFoundError(`rollout ${rolloutId} has no attempts`);
    const attempt = attemptId === 'latest' ? attempts.at(-1) : attempts.find((a) => a.attempt_id === attemptId);
    if (!attempt) throw new NotFoundError(`rollout ${rolloutId} has no attempt ${attemptId}`);
    if (update.worker_id !== undefined) attempt.worker_id = update.worker_id;
    if (update.last_heartbeat_time !== undefined) attempt.last_heartbeat_time = update.last_heartbeat_time;
    if (update.metadata !== undefined) attempt.metadata = update.metadata;
    changes.attempts.add(attempt);
    if (update.status !== undefined) this.setAttemptStatus(rollout, attempt, update.status, now, changes);
    // A heartbeat sent this way counts as one sent by a span (Agent Lightning's runners send both).
    else if (update.last_heartbeat_time !== undefined) this.revive(rollout, attempt, now, changes);
    if ((update.worker_id || update.status !== undefined) && attempt.worker_id) {
      this.syncWorker(attempt.worker_id, attempt, now, changes, false);
    }
    return attempt;
  }

  /** A span arrived for the attempt: it is alive (see `revive`). */
  heartbeat(rolloutId: string, attemptId: string, now: number, changes: Changes): void {
    const attempt = this.attempts.get(rolloutId)?.find((a) => a.attempt_id === attemptId);
    const rollout = this.rollouts.get(rolloutId);
    if (!attempt || !rollout) return;
    const revived = this.revive(rollout, attempt, now, changes);
    // A heartbeat alone is written through at most every few seconds: spans arrive many times
    // a second, and after a restart a few seconds' older heartbeat changes nothing that matters.
    const persisted = this.persistedHeartbeats.get(attempt) ?? 0;
    if (revived || now - persisted >= HEARTBEAT_PERSIST_SECONDS) {
      attempt.last_heartbeat_time = now;
      this.persistedHeartbeats.set(attempt, now);
      changes.attempts.add(attempt);
    } else {
      changes.heartbeats.add(attempt);
    }
  }

  /** Sets the time of the heartbeats of `changes` not written, once their spans are stored. */
  heartbeatsStored(changes: Changes, now: number): void {
    for (const attempt of changes.heartbeats)
      attempt.last_heartbeat_time = Math.max(attempt.last_heartbeat_time ?? 0, now);
  }

  /**
   * The attempt is alive: preparing or unresponsive, it runs (again; a timed-out one stays timed
   * out), and so does its rollout when it is the latest. Returns whether the attempt's status changed.
   */
  private revive(rollout: Rollout, attempt: Attempt, now: number, changes: Changes): boolean {
    const revived = attempt.status === 'preparing' || attempt.status === 'unresponsive';
    if (revived) attempt.status = 'running';
    const latest = this.attempts.get(rollout.rollout_id)?.at(-1) === attempt;
    if (latest && (rollout.status === 'preparing' || QUEUED.includes(rollout.status))) {
      this.setRolloutStatus(rollout, 'running', now, changes);
    }
    return revived;
  }

  /**
   * Marks running attempts past their timeout or silent past unresponsive_seconds. `heardSince`:
   * no heartbeat could arrive before it (the state's database restarted then), so silence counts
   * from it at the earliest.
   */
  watchdog(now: number, changes: Changes, heardSince = 0): void {
    for (const rollout of this.rollouts.values()) {
      if (!ACTIVE.includes(rollout.status)) continue;
      const attempt = this.attempts.get(rollout.rollout_id)?.at(-1);
      if (!attempt || !LIVE_ATTEMPT.includes(attempt.status)) continue;
      const { timeout_seconds: timeout, unresponsive_seconds: silence } = rollout.config;
      let status: AttemptStatus | null = null;
      if (timeout !== null && now - attempt.start_time > timeout) status = 'timeout';
      else if (
        silence !== null &&
        now - Math.max(heardSince, attempt.last_heartbeat_time ?? attempt.start_time) > silence
      )
        status = 'unresponsive';
      if (status === null) continue;
      changes.attempts.add(attempt);
      this.setAttemptStatus(rollout, attempt, status, now, changes);
      if (attempt.worker_id) this.syncWorker(attempt.worker_id, attempt, now, changes, false);
    }
  }

  addResources(resources: NamedResources, now: number, changes: Changes): ResourcesUpdate {
    return this.updateResources(newId('rs-', 12), resources, now, changes);
  }

  updateResources(resourcesId: string, resources: NamedResources, now: number, changes: Changes): ResourcesUpdate {
    const existing = this.resources.get(resourcesId);
    const update: ResourcesUpdate = existing
      ? { ...existing, resources, version: existing.version + 1, update_time: now }
      : { resources_id: resourcesId, version: 1, create_time: now, update_time: now, resources };
    this.resources.set(resourcesId, update);
    changes.resources.add(update);
    return update;
  }

  updateWorker(
    workerId: string,
    heartbeatStats: Record<string, unknown> | undefined,
    now: number,
    changes: Changes,
  ): Worker {
    const worker = this.worker(workerId);
    worker.last_heartbeat_time = now;
    if (heartbeatStats !== undefined) worker.heartbeat_stats = heartbeatStats;
    changes.workers.add(worker);
    return worker;
  }

  latestAttempt(rolloutId: string): Attempt | null {
    return this.attempts.get(rolloutId)?.at(-1) ?? null;
  }

  /** The rollout with its latest attempt when it has one (the shape GET rollouts/{id} answers). */
  withLatestAttempt(rollout: Rollout): Rollout | AttemptedRollout {
    const attempt = this.latestAttempt(rollout.rollout_id);
    return attempt ? { ...rollout, attempt } : { ...rollout };
  }

  rollout(rolloutId: string): Rollout {
    const rollout = this.rollouts.get(rolloutId);
    if (!rollout) throw new NotFoundError(`no rollout ${rolloutId}`);
    return rollout;
  }

  private createRollout(
    request: RolloutRequest,
    status: RolloutStatus,
    latestResources: string | null,
    now: number,
    changes: Changes,
  ): Rollout {
    const id = request.rollout_id ?? newId('ro-', 12);
    if (request.rollout_id === undefined) changes.freshRolloutIds.add(id);
    const rollout: Rollout = {
      rollout_id: id,
      input: request.input ?? null,
      start_time: now,
      end_time: null,
      mode: request.mode ?? null,
      resources_id: request.resources_id ?? latestResources,
      status,
      config: defaultConfig(request.config),
      metadata: request.metadata ? { ...request.metadata } : {},
    };
    this.rollouts.set(rollout.rollout_id, rollout);
    changes.rollouts.add(rollout);
    return rollout;
  }

  private createAttempt(
    rollout: Rollout,
    workerId: string | null,
    now: number,
    changes: Changes,
    attemptId?: string | null,
  ): Attempt {
    const attempts = this.attempts.get(rollout.rollout_id) ?? [];
    const attempt: Attempt = {
      rollout_id: rollout.rollout_id,
      attempt_id: attemptId ?? newId('at-', 8),
      sequence_id: attempts.length + 1,
      start_time: now,
      end_time: null,
      status: 'preparing',
      worker_id: workerId,
      last_heartbeat_time: null,
      metadata: {},
    };
    attempts.push(attempt);
    this.attempts.set(rollout.rollout_id, attempts);
    changes.attempts.add(attempt);
    return attempt;
  }

  /** Sets an attempt's status; the latest attempt's status decides its rollout's. */
  private setAttemptStatus(
    rollout: Rollout,
    attempt: Attempt,
    status: AttemptStatus,
    now: number,
    changes: Changes,
  ): void {
    attempt.status = status;
    if (ENDING_ATTEMPT.includes(status)) attempt.end_time = now;
    if (this.latestAttempt(rollout.rollout_id) !== attempt) return;
    let next: RolloutStatus;
    if (status === 'failed' || status === 'timeout' || status === 'unresponsive') {
      const retry =
        rollout.config.retry_condition.includes(status) && attempt.sequence_id < rollout.config.max_attempts;
      next = retry ? 'requeuing' : 'failed';
    } else {
      next = status;
    }
    if (next !== rollout.status) this.setRolloutStatus(rollout, next, now, changes);
  }

  private setRolloutStatus(rollout: Rollout, status: RolloutStatus, now: number, changes: Changes): void {
    rollout.status = status;
    changes.rollouts.add(rollout);
    this.finished.delete(rollout.rollout_id);
    if (FINISHED_ROLLOUT_STATUSES.includes(status)) {
      rollout.end_time = now;
      this.finished.add(rollout.rollout_id);
      this.onFinished(rollout);
    }
    if (QUEUED.includes(status)) this.pushQueue(rollout.rollout_id);
  }

  private pushQueue(rolloutId: string): void {
    if (this.queued.has(rolloutId)) return;
    this.queued.add(rolloutId);
    this.queue.push(rolloutId);
    this.onQueued();
  }

  private compactQueue(): void {
    if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
  }

  private worker(workerId: string): Worker {
    let worker = this.workers.get(workerId);
    if (!worker) {
      worker = {
        worker_id: workerId,
        status: 'unknown',
        heartbeat_stats: null,
        last_heartbeat_time: null,
        last_dequeue_time: null,
        last_busy_time: null,
        last_idle_time: null,
        current_rollout_id: null,
        current_attempt_id: null,
      };
      this.workers.set(workerId, worker);
    }
    return worker;
  }

  private workerIdle(workerId: string, now: number, changes: Changes): void {
    const worker = this.worker(workerId);
    if (worker.status !== 'idle') {
      worker.status = 'idle';
      worker.last_idle_time = now;
    }
    worker.last_dequeue_time = now;
    changes.workers.add(worker);
  }

  /** A worker's status follows the attempt it runs. */
  private syncWorker(workerId: string, attempt: Attempt, now: number, changes: Changes, dequeued: boolean): void {
    const worker = this.worker(workerId);
    if (dequeued) worker.last_dequeue_time = now;
    if (ENDING_ATTEMPT.includes(attempt.status) || attempt.status === 'timeout' || attempt.status === 'unresponsive') {
      worker.status = ENDING_ATTEMPT.includes(attempt.status) ? 'idle' : 'unknown';
      worker.last_idle_time = now;
      worker.current_rollout_id = null;
      worker.current_attempt_id = null;
    } else {
      worker.status = 'busy';
      worker.last_busy_time = now;
      worker.current_rollout_id = attempt.rollout_id;
      worker.current_attempt_id = attempt.attempt_id;
    }
    changes.workers.add(worker);
  }
}
