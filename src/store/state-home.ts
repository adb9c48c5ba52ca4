import type { ColumnarRows } from '../otlp/columns.js';
import { SPAN } from '../otlp/span-columns.js';
import type { DuckDBFile } from './duckdb-file.js';
import { EmbeddedLightningStore } from './lightning.js';
import { DEFAULT_FINISHED_ROLLOUTS_IN_MEMORY, type StoreOptions } from './options.js';
import type { PostgresLightningStore } from './postgres/lightning.js';
import { RolloutState, type Changes } from './rollout-state.js';
import { loadRolloutState, stateSource } from './rollout-tables.js';
import { rolloutIdsOf, type SequenceIds } from './sequence-ids.js';
import type { LightningFile, ServerLightningStore } from './server-lightning.js';
import type { TableRows } from './writer.js';

/** Where the LightningStore's state lives: in the DuckDB file, or in PostgreSQL shared by servers. */
export type StateBackend = 'duckdb' | 'postgres';

/** The LightningStore's state where the options put it, and what a span write does to it. */
export interface StateHome {
  readonly backend: StateBackend;
  readonly lightning: ServerLightningStore;
  /** Why the state cannot be reached now (PostgreSQL out of reach), or null. */
  readonly failure: string | null;
  /**
   * Commits spans together with what they do to the state: every span is a heartbeat of its
   * attempt, and spans of a rollout without a sequence id get the next ones. `admit` throws to
   * refuse the write before anything changes; `commit` writes the spans with the state's rows.
   */
  commitSpans(
    spans: ColumnarRows,
    admit: () => void,
    commit: (stateRows: readonly TableRows[]) => Promise<void>,
  ): Promise<void>;
  /** Brings the file's copy of the state up to date before a SQL read (PostgreSQL's; the file's own is always). */
  syncReplica(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Opens the state: the file's own, loaded into memory, or PostgreSQL's (`options.state`). A
 * file keeps one kind for good: its own state, or a copy of one database's (stateSource).
 */
export async function openStateHome(
  file: DuckDBFile,
  lightningFile: LightningFile,
  sequences: SequenceIds,
  options: StoreOptions,
): Promise<StateHome> {
  const held = await stateSource(file.connection);
  if (!options.state) {
    if (held.source !== null)
      throw new Error(
        `${file.path} holds a copy of the state kept in PostgreSQL; serve it with --state and that database`,
      );
    const home = fileStateHome(file, lightningFile, sequences, options);
    await home.embedded.load();
    return home;
  }
  if (held.ownRows)
    throw new Error(
      `${file.path} holds rollouts of its own (served without --state); give servers with --state a new --db file`,
    );
  const { PostgresLightningStore } = await import('./postgres/lightning.js');
  const shared = await PostgresLightningStore.open(
    options.state,
    lightningFile,
    async (instanceId) => {
      if (held.source !== null && held.source !== instanceId)
        throw new Error(`${file.path} holds a copy of the state of another PostgreSQL database (${held.source})`);
      return held.xmin;
    },
    { maxConnections: options.stateConnections },
  );
  return postgresStateHome(shared);
}

/**
 * The state kept in the file, in memory and written through: a span's heartbeat counts only
 * if the span is stored, so one group commit holds both. Not loaded yet (a read-only store
 * never loads it).
 */
export function fileStateHome(
  file: DuckDBFile,
  lightningFile: LightningFile,
  sequences: SequenceIds,
  options: StoreOptions,
): StateHome & { embedded: EmbeddedLightningStore } {
  const finishedInMemory = options.finishedRolloutsInMemory ?? DEFAULT_FINISHED_ROLLOUTS_IN_MEMORY;
  const embedded = new EmbeddedLightningStore(new RolloutState(), lightningFile, {
    finishedInMemory,
    sequences,
    readState: async (sql) => {
      const rows: Record<string, unknown>[] = [];
      for await (const batch of file.stream(sql, false)) rows.push(...batch);
      return rows;
    },
    reloadState: async (state) => {
      // After DuckDB invalidated the database, the reload is what opens it again: the writes
      // that would do so wait for the reload.
      await file.ensureOpen();
      let version = 0;
      await file.between(async (connection) => {
        version = await file.read(() => loadRolloutState(connection, state, finishedInMemory));
      });
      return version;
    },
  });
  return {
    backend: 'duckdb',
    lightning: embedded,
    embedded,
    failure: null,
    commitSpans: async (spans, admit, commit) => {
      await sequences.prepare(rolloutIdsOf(spans));
      await embedded.apply((now, changes, state) => {
        // Refused before the heartbeats, which the writer's refusal would have to undo (a reload).
        admit();
        sequences.assign(spans);
        heartbeats(spans, state, now, changes);
      }, commit);
    },
    syncReplica: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
}

/**
 * The state in PostgreSQL: sequence ids come from its shared counters and the heartbeats go
 * there before the spans are written, so a failure of either leaves nothing stored and the
 * client's retry does it all again. (A write that fails after them leaves the attempt alive
 * by spans its retry will store.)
 */
function postgresStateHome(shared: PostgresLightningStore): StateHome {
  return {
    backend: 'postgres',
    lightning: shared,
    get failure() {
      return shared.failure;
    },
    commitSpans: async (spans, admit, commit) => {
      await shared.spansArriving(spans);
      admit();
      await commit([]);
    },
    syncReplica: () => shared.syncReplica(),
    close: () => shared.close(),
  };
}

/** Every span is a heartbeat of its attempt (once per attempt in a batch). */
function heartbeats(rows: ColumnarRows, state: RolloutState, now: number, changes: Changes): void {
  const rollouts = rows.columns[SPAN.rollout_id] as (string | null)[];
  const attempts = rows.columns[SPAN.attempt_id] as (string | null)[];
  const seen = new Set<string>();
  for (let i = 0; i < rows.length; i++) {
    const rollout = rollouts[i];
    const attempt = attempts[i];
    // Spans of a request mostly share one attempt: skip the repeats without building keys.
    if (rollout === null || attempt === null || (rollout === rollouts[i - 1] && attempt === attempts[i - 1])) continue;
    if (seen.has(`${rollout}/${attempt}`)) continue;
    seen.add(`${rollout}/${attempt}`);
    state.heartbeat(rollout, attempt, now, changes);
  }
}
