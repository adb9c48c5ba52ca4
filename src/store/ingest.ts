import { StoreBusyError } from '../api/errors.js';
import { selectRows, type ColumnarRows } from '../otlp/columns.js';
import { LOG_COLUMNS, SPAN, SPAN_COLUMNS } from '../otlp/span-columns.js';
import type { DuckDBFile } from './duckdb-file.js';
import { OTLP_IDS_WIDTH, SPAN_MEMORY_GENERATION, SpanKeyIndex, spanKey } from './span-keys.js';
import type { StateHome } from './state-home.js';

export interface WriteResult {
  /** Rows now durable in the database. */
  readonly stored: number;
  /** Spans dropped because the store already holds an identical one. */
  readonly duplicates: number;
}

/** What hears of span writes: the maintenance schedule (idle time, derive rounds, span moves). */
export interface SpanWriteListener {
  /** Spans were admitted and go to the writer now. */
  spansWriting(): void;
  /** Spans were committed. */
  spansCommitted(count: number): void;
}

/**
 * Span and log ingest: drops re-delivered spans, numbers the spans of a rollout, and commits
 * each span with its heartbeat (the state home decides how, and numbers them). The identities
 * of stored spans live in memory, loaded from the file on open.
 */
export class SpanIngest {
  private readonly spanKeys = new SpanKeyIndex();
  /** Span rows accepted but not yet committed. */
  private readonly pendingSpans = new Set<ColumnarRows>();

  /** `ownSpans` is the relation of this server's spans (with a span directory, the moved ones too). */
  constructor(
    private readonly file: DuckDBFile,
    private readonly state: StateHome,
    private readonly ownSpans: string,
    private readonly listener: SpanWriteListener,
  ) {}

  /**
   * Loads the identities of the spans stored last: as many as one generation of the index holds
   * (SPAN_MEMORY_GENERATION), the most it would remember of them had the server run on; reading
   * every span's made an open's time follow the file. They come as one text per 8,192 spans
   * (addOtlpIds): two strings a span cost 7 µs each to read. Every way in checks span ids to be
   * OTLP's lowercase hex (its decoders, the REST API), as the exact check of suspects relies on.
   */
  async load(): Promise<void> {
    const result = await this.file.connection.stream(
      `SELECT string_agg(trace_id || span_id, '') FROM (SELECT * FROM ${this.ownSpans})
        WHERE commit_seq > (SELECT max(commit_seq) FROM (SELECT * FROM ${this.ownSpans})) - ${SPAN_MEMORY_GENERATION}
          AND regexp_full_match(trace_id || span_id, '[0-9a-f]{${OTLP_IDS_WIDTH}}')
        GROUP BY commit_seq // 8192`,
    );
    for (let chunk = await result.fetchChunk(); chunk && chunk.rowCount > 0; chunk = await result.fetchChunk())
      for (const [ids] of chunk.getRows()) this.spanKeys.addOtlpIds(String(ids));
  }

  /**
   * Stores spans durably: drops re-delivered ones, gives spans of a rollout without a sequence
   * id the next ids of that rollout (in start-time order), and resolves after the commit.
   */
  async writeSpans(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    if (bytes > 0 && this.file.busy) throw new StoreBusyError(1);
    // Pending before the first await, so that a concurrent write of the same spans sees it.
    this.pendingSpans.add(rows);
    const isNew = new Uint8Array(rows.length);
    try {
      const kept = await this.dropDuplicates(rows, isNew);
      await this.state.commitSpans(
        kept,
        // Refused once more before anything changes: the queue may have filled meanwhile.
        () => {
          if (bytes > 0 && this.file.busy) throw new StoreBusyError(1);
        },
        (stateRows) => {
          this.listener.spansWriting();
          return this.file.write([{ table: 'spans', columns: SPAN_COLUMNS, rows: kept }, ...stateRows], bytes);
        },
      );
      // Counted once committed: a round whose snapshot missed them leaves them counted.
      this.listener.spansCommitted(kept.length);
      return { stored: kept.length, duplicates: rows.length - kept.length };
    } catch (error) {
      const traceIds = rows.columns[SPAN.trace_id] as string[];
      const spanIds = rows.columns[SPAN.span_id] as string[];
      for (let i = 0; i < rows.length; i++) if (isNew[i]) this.spanKeys.remove(traceIds[i], spanIds[i]);
      throw error;
    } finally {
      this.pendingSpans.delete(rows);
    }
  }

  async writeLogs(rows: ColumnarRows, bytes: number): Promise<WriteResult> {
    await this.file.write([{ table: 'logs', columns: LOG_COLUMNS, rows }], bytes);
    return { stored: rows.length, duplicates: 0 };
  }

  /**
   * The rows of `rows` that the store does not hold yet (nor a write in flight). The span-key
   * index answers for almost every span; only suspected re-deliveries cost exact comparison.
   */
  private async dropDuplicates(rows: ColumnarRows, isNew: Uint8Array): Promise<ColumnarRows> {
    const traceIds = rows.columns[SPAN.trace_id] as string[];
    const spanIds = rows.columns[SPAN.span_id] as string[];
    const suspects: string[] = [];
    for (let i = 0; i < rows.length; i++) {
      if (this.spanKeys.add(traceIds[i], spanIds[i])) isNew[i] = 1;
      else suspects.push(spanIds[i]);
    }
    if (suspects.length === 0) return rows;
    const inFlight = new Set<string>();
    for (const pending of this.pendingSpans)
      if (pending !== rows) for (const key of exactKeys(pending)) inFlight.add(key);
    const stored = await this.storedSpanKeys(suspects);
    const keys = exactKeys(rows);
    const seen = new Set<string>();
    const keep: number[] = [];
    keys.forEach((key, i) => {
      if (!seen.has(key) && !inFlight.has(key) && !stored.has(key)) keep.push(i);
      seen.add(key);
    });
    return keep.length === rows.length ? rows : selectRows(rows, keep);
  }

  private async storedSpanKeys(spanIds: string[]): Promise<Set<string>> {
    // Span ids were checked to be hex by the decoders, so they are safe as literals.
    const list = [...new Set(spanIds)].map((id) => `'${id.replace(/[^0-9a-f]/g, '')}'`).join(',');
    // A connection of its own: the writer's may be inside a transaction right now.
    const { rows } = await this.file.query(
      `SELECT trace_id, span_id, rollout_id, attempt_id FROM (SELECT * FROM ${this.ownSpans}) WHERE span_id IN (${list})`,
      false,
    );
    return new Set(
      rows.map((r) =>
        spanKey(String(r.trace_id), String(r.span_id), r.rollout_id as string | null, r.attempt_id as string | null),
      ),
    );
  }
}

function exactKeys(rows: ColumnarRows): string[] {
  // Trace and span ids are never null (SPAN_COLUMNS: notNull).
  const traceIds = rows.columns[SPAN.trace_id] as string[];
  const spanIds = rows.columns[SPAN.span_id] as string[];
  const rolloutIds = rows.columns[SPAN.rollout_id] as (string | null)[];
  const attemptIds = rows.columns[SPAN.attempt_id] as (string | null)[];
  return Array.from({ length: rows.length }, (_, i) => spanKey(traceIds[i], spanIds[i], rolloutIds[i], attemptIds[i]));
}
