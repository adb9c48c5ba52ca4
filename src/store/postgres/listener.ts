import type pg from 'pg';
import type { StoreEvents } from '../events.js';
import type { PgDatabase } from './database.js';

/** The channel of queue and finish events between servers. */
const EVENTS_CHANNEL = 'agl_events';
type EventKind = 'queued' | 'finished';

const RECONNECT_MS = 1000;

/**
 * Tells every server's long polls that a committed change queued or finished rollouts: NOTIFY,
 * once the change committed, not in its transaction. A NOTIFY holds one lock of the whole
 * database from its transaction's commit record until that is on disk, so that transactions
 * notifying at their COMMIT took turns at the disk (all completions of a fleet, one fsync each:
 * 60-80 rollouts/s on the development machine). Sent alone, its own commit need not wait for
 * the disk (a notification lost in a crash costs a waiter one look on its own), and one per kind
 * in flight at a time stands for every change committed before it is sent.
 */
export class EventSender {
  private readonly sending = new Map<EventKind, Promise<void>>();
  private readonly again = new Set<EventKind>();

  constructor(private readonly db: PgDatabase) {}

  send(kind: EventKind): void {
    if (this.sending.has(kind)) {
      this.again.add(kind);
      return;
    }
    const sent = this.db
      .simple(`BEGIN; SET LOCAL synchronous_commit = off; SELECT pg_notify('${EVENTS_CHANNEL}', '${kind}'); COMMIT`)
      // Waiters look again on their own within a second or two; nothing to retry here.
      .catch(() => {})
      .finally(() => {
        this.sending.delete(kind);
        if (this.again.delete(kind)) this.send(kind);
      });
    this.sending.set(kind, sent);
  }

  /** Waits for the events being sent (before the pool closes). */
  async drain(): Promise<void> {
    while (this.sending.size > 0) await Promise.all(this.sending.values());
  }
}

/**
 * Wakes this server's long polls when any server's change queued or finished a rollout:
 * LISTEN on a connection of its own; the changes NOTIFY in their transactions (state-rows.ts).
 * A lost connection is opened again a second later, and every waiter wakes then, for what it
 * may have missed; meanwhile `listening` is false and waiters look again on their own.
 */
export class EventListener {
  listening = false;
  private client: pg.Client | null = null;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: PgDatabase,
    /** Woken by 'queued' (dequeues wait on it) and 'finished' (waitForRollouts). */
    private readonly events: Record<EventKind, StoreEvents>,
  ) {}

  async start(): Promise<void> {
    const client = this.db.connectClient();
    client.on('notification', (message) => {
      if (message.payload === 'queued' || message.payload === 'finished') this.events[message.payload].wake();
    });
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}`);
    } catch (error) {
      client.end().catch(() => {});
      throw error;
    }
    if (this.closed) {
      await client.end();
      return;
    }
    this.client = client;
    this.listening = true;
    this.events.queued.wake();
    this.events.finished.wake();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    const client = this.client;
    this.client = null;
    this.listening = false;
    await client?.end().catch(() => {});
  }

  private lost(client: pg.Client): void {
    if (this.client !== client) return;
    this.client = null;
    this.listening = false;
    client.end().catch(() => {});
    this.reconnectLater();
  }

  private reconnectLater(): void {
    if (this.closed) return;
    this.retry = setTimeout(() => void this.start().catch(() => this.reconnectLater()), RECONNECT_MS);
    this.retry.unref();
  }
}
