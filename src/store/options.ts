import { totalmem } from 'node:os';

/** The write budget when the options give none (write-budget.ts). */
export const DEFAULT_WRITE_MEMORY_BYTES = 64 * 2 ** 20;
/**
 * DuckDB's memory when the options give none: a quarter of the machine's (or its container's).
 * DuckDB's own default, 80%, is a cache that grows with the file for as long as the server runs
 * (the soak: 600-700 MB an hour), on a machine it shares with runners and a trainer.
 */
export function defaultMemoryLimitBytes(): number {
  const constrained = process.constrainedMemory();
  const machine = totalmem();
  return Math.floor((constrained > 0 && constrained < machine ? constrained : machine) / 4);
}
/** Decoded bytes that may wait for a commit when the options give no maxQueuedBytes. */
export const DEFAULT_MAX_QUEUED_BYTES = 64 * 2 ** 20;
/** A query's time limit when the options give no queryTimeoutMs. */
export const DEFAULT_QUERY_TIMEOUT_MS = 30_000;
/** How often spans move to the span directory when the options do not say (spansMoveEveryMs). */
export const DEFAULT_SPANS_MOVE_EVERY_MS = 10_000;
/** Finished rollouts the embedded state holds in memory when the options do not say. */
export const DEFAULT_FINISHED_ROLLOUTS_IN_MEMORY = 1_000;
/** How long load lasts before the store's own work runs under it, when the options do not say. */
export const DEFAULT_MAINTAIN_UNDER_LOAD_AFTER_MS = 30_000;

export interface StoreOptions {
  /** The DuckDB file; created on first use. */
  readonly path: string;
  /** Decoded bytes that may wait for a commit before writes get StoreBusyError (default 64 MiB). */
  readonly maxQueuedBytes?: number;
  /** Time limit of one query (default 30 s; Infinity for none). */
  readonly queryTimeoutMs?: number;
  /** Rows one query may return as JSON (default 100,000); exports to files have no limit. */
  readonly maxQueryRows?: number;
  /**
   * WAL size at which DuckDB checkpoints during writes (DuckDB setting; default 1GB). The store
   * checkpoints by itself, idle or under load (see `deriveWhenIdleMs`), so this is the bound
   * during a burst shorter than `maintainUnderLoadAfterMs` or with that schedule off, and the
   * most a restart after a crash replays.
   */
  readonly checkpointThreshold?: string;
  /**
   * How often the store's own work runs, and how long no span may have been written for the
   * store to count as idle: a checkpoint of a WAL over 16 MB (idle) or 64 MB (under load), else
   * a round of the deriver (maintenance.ts; default 250 ms; Infinity: only `deriveAll()`
   * derives, and DuckDB checkpoints at `checkpointThreshold`).
   */
  readonly deriveWhenIdleMs?: number;
  /**
   * How long ingest may go on with no idle moment before that work runs under load too, bounded
   * (default 30 s): a shorter burst runs at full speed, and the idle time after it catches up.
   */
  readonly maintainUnderLoadAfterMs?: number;
  /**
   * Memory that committed rows not yet checkpointed may hold while writes run (default 64 MiB);
   * more waits in DuckDB's temporary folder beside the file until the next checkpoint (see
   * write-budget.ts). Reads run under memoryLimitBytes.
   */
  readonly writeMemoryBytes?: number;
  /**
   * The most memory DuckDB may use (its `memory_limit`): its cache of the file, and what reads
   * need, which spill into the temporary folder beyond it (default: defaultMemoryLimitBytes for
   * a store that writes, DuckDB's own for a read-only one). At least writeMemoryBytes.
   */
  readonly memoryLimitBytes?: number;
  /**
   * Request bytes from which a group's COMMIT runs with DuckDB's default memory limit rather than
   * under the write budget (default: a quarter of writeMemoryBytes; see the writer's option).
   */
  readonly commitWithMoreMemoryBytes?: number;
  /** Open for queries only (another process may not hold the file for writing meanwhile). */
  readonly readOnly?: boolean;
  /**
   * A PostgreSQL URL (postgres://user@host/db): the LightningStore's state (rollouts, attempts,
   * resources, workers, the queue, the span sequence counters) lives there, shared by every
   * server that names it (store/postgres/). Spans stay in this file, which keeps a copy of the
   * state for SQL. Absent: the state lives in this file.
   */
  readonly state?: string;
  /**
   * Finished rollouts the state kept in the file holds in memory, the latest to change (default
   * 1,000: about a minute of a busy server's, for the reads that follow a finish). The others are
   * read from the file when asked for, so that a server running for days holds what runs and
   * waits, not every rollout it ran (RolloutState.retire).
   */
  readonly finishedRolloutsInMemory?: number;
  /** Connections to PostgreSQL this server may hold (default 16). */
  readonly stateConnections?: number;
  /**
   * A directory shared by servers: spans move there as Parquet files, and every read (the views
   * of the schema `fleet`) sees every server's (span-files.ts, fleet-views.ts).
   */
  readonly spansDir?: string;
  /** Reads the span directory without moving this file's spans there (agl query|export --spans-dir). */
  readonly spansDirReadOnly?: boolean;
  /** This server's name in the span directory (default: a random id kept in the file). */
  readonly serverId?: string;
  /** How often spans move to the span directory (default 10 s; Infinity: on `moveSpans()` and close only). */
  readonly spansMoveEveryMs?: number;
}
