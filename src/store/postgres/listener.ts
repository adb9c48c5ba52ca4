import type pg from 'pg';
import type { StoreEvents } from '../events.js';
import type { PgDatabase } from './database.js';
import { EVENTS_CHANNEL } from './state-rows.js';

const RECONNECT_MS = 1000;

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
    private readonly events: Record<'queued' | 'finished', StoreEvents>,
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
