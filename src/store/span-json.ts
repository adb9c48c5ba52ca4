import type { Span, SpanContext } from '../api/types.js';
import type { ColumnarRows } from '../otlp/columns.js';
import { finishRows, newSpanRows } from '../otlp/batch.js';
import { SPAN } from '../otlp/span-columns.js';

// Agent Lightning's Span JSON (REST) to and from rows of `spans`. Times on the wire are float
// seconds; in the table they are TIMESTAMP_NS. Events and links keep agl's stored shape.

/** A span to store: Agent Lightning's Span, or one of no rollout yet (ids null) with its kind. */
export type SpanInput = Omit<Span, 'rollout_id' | 'attempt_id' | 'sequence_id'> & {
  rollout_id: string | null;
  attempt_id: string | null;
  /** null: the next of the rollout's sequence, given when it is stored. */
  sequence_id: number | null;
  kind?: string;
  /** Exact start and end in nanoseconds, over the times in float seconds (kept to the microsecond). */
  nanos?: { readonly start: bigint; readonly end: bigint };
};

export function spanRows(...spans: SpanInput[]): ColumnarRows {
  const rows = newSpanRows();
  const c = rows.columns;
  // A batch's spans mostly share one resource object (the gateway's are all its own): its JSON is made once.
  let lastResource: unknown;
  let lastResourceJson = '{}';
  for (const span of spans) {
    const resource = span.resource?.attributes ?? {};
    const traceState = span.context?.trace_state ?? {};
    c[SPAN.rollout_id].push(span.rollout_id);
    c[SPAN.attempt_id].push(span.attempt_id);
    c[SPAN.sequence_id].push(span.sequence_id);
    c[SPAN.trace_id].push(span.trace_id);
    c[SPAN.span_id].push(span.span_id);
    c[SPAN.parent_id].push(span.parent_id);
    c[SPAN.name].push(span.name);
    c[SPAN.kind].push(typeof span.kind === 'string' ? span.kind : 'INTERNAL');
    c[SPAN.start_time].push(span.nanos?.start ?? nanos(span.start_time));
    c[SPAN.end_time].push(span.nanos?.end ?? nanos(span.end_time));
    c[SPAN.status_code].push(span.status.status_code);
    c[SPAN.status_message].push(span.status.description);
    c[SPAN.attributes].push(JSON.stringify(span.attributes));
    c[SPAN.events].push(
      span.events.length === 0
        ? '[]'
        : JSON.stringify(
            span.events.map((e) => ({
              time_unix_nano: String(nanos(e.timestamp) ?? 0n),
              name: e.name,
              attributes: e.attributes ?? {},
            })),
          ),
    );
    c[SPAN.links].push(
      span.links.length === 0
        ? '[]'
        : JSON.stringify(
            span.links.map((l) => ({
              trace_id: l.context.trace_id,
              span_id: l.context.span_id,
              trace_state: traceStateText(l.context.trace_state),
              attributes: l.attributes ?? {},
            })),
          ),
    );
    if (resource !== lastResource) {
      lastResource = resource;
      lastResourceJson = JSON.stringify(resource);
    }
    c[SPAN.resource].push(lastResourceJson);
    c[SPAN.scope_name].push(null);
    c[SPAN.scope_version].push(null);
    c[SPAN.service_name].push(typeof resource['service.name'] === 'string' ? resource['service.name'] : null);
    c[SPAN.trace_state].push(Object.keys(traceState).length ? traceStateText(traceState) : null);
    c[SPAN.flags].push(null);
  }
  rows.length = spans.length;
  return finishRows(rows);
}

/** The SELECT list that `spanFromRow` reads. */
export const SPAN_JSON_COLUMNS = `rollout_id, attempt_id, sequence_id, trace_id, span_id, parent_id, name, kind, status_code, status_message,
  attributes, events, links, resource, trace_state, epoch_us(start_time) / 1e6 AS start_s, epoch_us(end_time) / 1e6 AS end_s`;

export function spanFromRow(row: Record<string, unknown>): Span {
  const traceState = parseTraceState(row.trace_state as string | null);
  const context = (traceId: string, spanId: string, state: Record<string, string> = {}): SpanContext => ({
    trace_id: traceId,
    span_id: spanId,
    is_remote: false,
    trace_state: state,
  });
  const events = (row.events as { time_unix_nano: string; name: string; attributes: Record<string, unknown> }[]) ?? [];
  const links =
    (row.links as { trace_id: string; span_id: string; trace_state: string; attributes: Record<string, unknown> }[]) ??
    [];
  return {
    rollout_id: row.rollout_id as string,
    attempt_id: row.attempt_id as string,
    sequence_id: Number(row.sequence_id),
    trace_id: row.trace_id as string,
    span_id: row.span_id as string,
    parent_id: (row.parent_id as string | null) ?? null,
    name: row.name as string,
    status: {
      status_code: row.status_code as Span['status']['status_code'],
      description: (row.status_message as string | null) ?? null,
    },
    attributes: (row.attributes as Record<string, unknown>) ?? {},
    events: events.map((e) => ({
      name: e.name,
      attributes: e.attributes,
      timestamp: Number(BigInt(e.time_unix_nano) / 1000n) / 1e6 || null,
    })),
    links: links.map((l) => ({
      context: context(l.trace_id, l.span_id, parseTraceState(l.trace_state)),
      attributes: l.attributes,
    })),
    start_time: (row.start_s as number | null) ?? null,
    end_time: (row.end_s as number | null) ?? null,
    context: context(row.trace_id as string, row.span_id as string, traceState),
    parent: row.parent_id ? context(row.trace_id as string, row.parent_id as string) : null,
    resource: { attributes: (row.resource as Record<string, unknown>) ?? {}, schema_url: '' },
  };
}

const nanos = (seconds: number | null | undefined): bigint | null =>
  seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds <= 0
    ? null
    : BigInt(Math.round(seconds * 1e6)) * 1000n;

const traceStateText = (state: Record<string, string> | undefined) =>
  Object.entries(state ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',');

function parseTraceState(text: string | null | undefined): Record<string, string> {
  const state: Record<string, string> = {};
  for (const part of (text ?? '').split(',')) {
    const at = part.indexOf('=');
    if (at > 0) state[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return state;
}
