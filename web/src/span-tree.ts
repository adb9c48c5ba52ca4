/** The rows of a waterfall: an attempt's spans in tree order, each with its depth. No DOM here. */

export interface TimedSpan {
  readonly span_id: string;
  readonly parent_id: string | null;
  readonly sequence_id: number;
  readonly start_time: number | null;
  readonly end_time: number | null;
}

export interface WaterfallRow<S extends TimedSpan> {
  readonly span: S;
  readonly depth: number;
}

const byStart = (a: TimedSpan, b: TimedSpan) =>
  (a.start_time ?? Infinity) - (b.start_time ?? Infinity) || a.sequence_id - b.sequence_id;

/**
 * Depth-first, children in start order. A span whose parent is not among `spans` (a root, or one
 * whose parent never arrived) starts a tree of its own; a cycle of parent ids cannot loop.
 */
export function waterfallRows<S extends TimedSpan>(spans: readonly S[]): WaterfallRow<S>[] {
  const ids = new Set(spans.map((s) => s.span_id));
  const children = new Map<string, S[]>();
  const roots: S[] = [];
  for (const span of spans) {
    if (span.parent_id !== null && ids.has(span.parent_id) && span.parent_id !== span.span_id) {
      const list = children.get(span.parent_id) ?? [];
      list.push(span);
      children.set(span.parent_id, list);
    } else roots.push(span);
  }
  const rows: WaterfallRow<S>[] = [];
  const seen = new Set<string>();
  const visit = (span: S, depth: number) => {
    if (seen.has(span.span_id)) return;
    seen.add(span.span_id);
    rows.push({ span, depth });
    for (const child of (children.get(span.span_id) ?? []).sort(byStart)) visit(child, depth + 1);
  };
  for (const root of roots.sort(byStart)) visit(root, 0);
  // Spans only reachable through a cycle: listed at the end, flat.
  for (const span of [...spans].sort(byStart)) visit(span, 0);
  return rows;
}

/** The time window the rows and marks span: [start, end], never empty. */
export function timeWindow(times: readonly (number | null)[]): { start: number; end: number } {
  const known = times.filter((t): t is number => t !== null && Number.isFinite(t));
  if (known.length === 0) return { start: 0, end: 1 };
  const start = Math.min(...known);
  const end = Math.max(...known);
  return { start, end: end > start ? end : start + 0.001 };
}
