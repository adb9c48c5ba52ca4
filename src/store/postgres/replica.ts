import { replicaRows, type CopiedVersion } from '../rollout-tables.js';
import type { TableRows } from '../writer.js';
import type { PgDatabase } from './database.js';

/**
 * Copies the shared state's history (PostgreSQL's state_log) into this server's DuckDB file
 * (state_history), so that the SQL views there (rollouts, attempts, resources, workers, and
 * what joins them: llm_calls, the adapters) see every server's changes. A copy runs before each
 * SQL read, so reads are never behind a change that was answered before they began.
 *
 * Log ids are not committed in order, so "ids above the last one copied" would miss a row whose
 * transaction was still open at the copy. Each copy notes the horizon of its snapshot (xmin:
 * every transaction below it had ended) and the next copy reads every row of transactions from
 * that horizon on; rows read twice are skipped by id. The horizon is stored with the rows, so a
 * restarted server continues where it stopped.
 */
export class StateReplica {
  /** Ids copied of transactions at or above the horizon, with their transaction ids. */
  private readonly copied = new Map<string, bigint>();
  private running: Promise<void> | null = null;
  /** A copy that starts after the one running: every caller that came meanwhile waits for it. */
  private next: Promise<void> | null = null;

  constructor(
    private readonly db: PgDatabase,
    private readonly source: string,
    private xmin: bigint,
    private readonly write: (rows: TableRows[]) => Promise<void>,
  ) {}

  /** Resolves once a copy that began after this call has been written. */
  sync(): Promise<void> {
    this.next ??= (this.running ?? Promise.resolve())
      .catch(() => {})
      .then(() => {
        const copy = this.copy();
        this.running = copy;
        this.next = null;
        return copy.finally(() => {
          if (this.running === copy) this.running = null;
        });
      });
    return this.next;
  }

  private async copy(): Promise<void> {
    const rows = await this.db.query<{
      horizon: string;
      id: string | null;
      xid: string | null;
      kind: string;
      key: string;
      data: string;
    }>(
      `WITH s AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon)
      SELECT s.horizon::text AS horizon, l.id::text AS id, l.xid::text AS xid, l.kind, l.key, l.data::text AS data
      FROM s LEFT JOIN agl.state_log l ON l.xid >= $1::xid8 ORDER BY l.id`,
      [String(this.xmin)],
    );
    const horizon = BigInt(rows[0].horizon);
    const fresh = rows.filter((row) => row.id !== null && !this.copied.has(row.id));
    // Only new rows are written (with the horizon); a horizon that moved alone is kept in memory,
    // and a restart copies from the older one written last (the rows read twice are the same).
    if (fresh.length > 0) {
      const versions: CopiedVersion[] = fresh.map((row) => ({
        kind: row.kind,
        key: row.key,
        version: Number(row.id),
        data: row.data,
      }));
      await this.write(replicaRows(versions, this.source, horizon));
      for (const row of fresh) this.copied.set(row.id as string, BigInt(row.xid as string));
    }
    this.xmin = horizon;
    for (const [id, xid] of this.copied) if (xid < horizon) this.copied.delete(id);
  }
}
