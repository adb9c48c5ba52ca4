/**
 * An attempt's spans as a waterfall: one row per span in tree order, a bar over the attempt's
 * time, LLM calls and rewards marked. Each reward is also drawn on the row of the call it is
 * credited to (TraceToTriplet's matching, from the calls' query), at the reward's own time.
 * Rows are buttons (Up/Down move between them); the chosen span's JSON is shown on demand.
 */
import { useMemo, useState } from 'preact/hooks';
import type { Span } from '../../../src/api/types.js';
import { formatDuration, formatNumber, formatTime, prettyJson } from '../format.js';
import { type WaterfallRow, timeWindow, waterfallRows } from '../span-tree.js';
import type { CallRow, RewardRow } from '../attempt-rows.js';

interface Marks {
  /** Call number (1, 2, ...) by the call's span id. */
  readonly callNumber: Map<string, number>;
  /** The primary rewards credited to each call, by the call's span id. */
  readonly credited: Map<string, RewardRow[]>;
  /** The call each reward span is credited to. */
  readonly creditedTo: Map<string, string>;
  /** Each reward span's rewards. */
  readonly rewardsOf: Map<string, RewardRow[]>;
}

function marksOf(calls: CallRow[], rewards: RewardRow[]): Marks {
  const rewardsOf = new Map<string, RewardRow[]>();
  for (const r of rewards) rewardsOf.set(r.span_id, [...(rewardsOf.get(r.span_id) ?? []), r]);
  const credited = new Map<string, RewardRow[]>();
  const creditedTo = new Map<string, string>();
  for (const call of calls) {
    if (!call.reward_span_id) continue;
    credited.set(
      call.span_id,
      (rewardsOf.get(call.reward_span_id) ?? []).filter((r) => r.is_primary),
    );
    creditedTo.set(call.reward_span_id, call.span_id);
  }
  return { callNumber: new Map(calls.map((c, i) => [c.span_id, i + 1])), credited, creditedTo, rewardsOf };
}

export function Waterfall(props: { spans: Span[]; total: number; calls: CallRow[]; rewards: RewardRow[] }) {
  const { spans, total, calls, rewards } = props;
  const rows = useMemo(() => waterfallRows(spans), [spans]);
  const marks = useMemo(() => marksOf(calls, rewards), [calls, rewards]);
  const window = timeWindow([...spans.flatMap((s) => [s.start_time, s.end_time]), ...rewards.map((r) => r.time)]);
  const [chosen, choose] = useState<string | undefined>(undefined);
  const chosenSpan = spans.find((s) => s.span_id === chosen);
  return (
    <section class="panel" aria-labelledby="spans-title">
      <h2 id="spans-title">Spans</h2>
      <p class="legend">
        {spans.length < total ? `The first ${spans.length} of ${total} spans. ` : `${spans.length} spans, `}
        {formatDuration(window.end - window.start)} from {formatTime(window.start)}. <span class="tag llm">LLM</span> a
        call, <span class="tag reward">reward</span> a reward span, <span class="reward-mark static">◆</span> a reward
        on the call it is credited to.
      </p>
      {/* biome-ignore lint/a11y/noStaticElementInteractions: arrow keys move between the row buttons */}
      <div class="waterfall" onKeyDown={moveFocus}>
        {rows.map((row) => (
          <SpanLine
            key={row.span.span_id}
            row={row}
            window={window}
            marks={marks}
            chosen={row.span.span_id === chosen}
            onChoose={() => choose(row.span.span_id === chosen ? undefined : row.span.span_id)}
          />
        ))}
      </div>
      {chosenSpan ? <SpanDetail span={chosenSpan} marks={marks} /> : null}
    </section>
  );
}

/** Up and Down move between the rows' buttons. */
function moveFocus(event: KeyboardEvent) {
  if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
  const buttons = [...(event.currentTarget as HTMLElement).querySelectorAll<HTMLButtonElement>('button.wf-row')];
  const at = buttons.indexOf(document.activeElement as HTMLButtonElement);
  const next = buttons[at + (event.key === 'ArrowDown' ? 1 : -1)];
  if (next) {
    event.preventDefault();
    next.focus();
  }
}

/** Where time `t` is on the track, and how wide `seconds` are on it. */
const percent = (t: number, window: { start: number; end: number }) =>
  `${(100 * (t - window.start)) / (window.end - window.start)}%`;
const share = (seconds: number, window: { start: number; end: number }) =>
  `${(100 * seconds) / (window.end - window.start)}%`;

function SpanLine(props: {
  row: WaterfallRow<Span>;
  window: { start: number; end: number };
  marks: Marks;
  chosen: boolean;
  onChoose: () => void;
}) {
  const { row, window, marks } = props;
  const span = row.span;
  const start = span.start_time ?? window.start;
  const end = span.end_time ?? start;
  const call = marks.callNumber.get(span.span_id);
  const ownRewards = marks.rewardsOf.get(span.span_id);
  const credited = marks.credited.get(span.span_id) ?? [];
  const kind = call ? 'llm' : ownRewards ? 'reward' : span.status.status_code === 'ERROR' ? 'error' : 'plain';
  const label = `${span.name}, ${formatDuration(end - start)}${call ? `, LLM call ${call}` : ''}${
    credited.length ? `, credited reward ${credited.map((r) => formatNumber(r.value)).join(', ')}` : ''
  }`;
  return (
    <button
      type="button"
      class={`wf-row ${kind}`}
      aria-pressed={props.chosen}
      aria-label={label}
      onClick={props.onChoose}
    >
      <span class="wf-name" style={{ paddingLeft: `${row.depth * 14 + 4}px` }}>
        {call ? <span class="tag llm">LLM {call}</span> : null}
        {ownRewards ? <span class="tag reward">reward</span> : null}
        {span.name}
      </span>
      <span class="wf-track">
        <span
          class="wf-bar"
          style={{ left: percent(start, window), width: `max(2px, ${share(end - start, window)})` }}
        />
        {(ownRewards ?? []).map((r) => (
          <span
            key={`own-${r.name}`}
            class="reward-mark own"
            style={{ left: percent(r.time, window) }}
            title={`reward ${r.name} = ${formatNumber(r.value)}`}
          >
            {formatNumber(r.value)}
          </span>
        ))}
        {credited.map((r) => (
          <span
            key={`${r.span_id}-${r.name}`}
            class="reward-mark"
            style={{ left: percent(r.time, window) }}
            title={`reward ${r.name} = ${formatNumber(r.value)}, credited to LLM call ${call}`}
          >
            ◆ {formatNumber(r.value)}
          </span>
        ))}
      </span>
      <span class="wf-dur">{formatDuration(end - start)}</span>
    </button>
  );
}

function SpanDetail({ span, marks }: { span: Span; marks: Marks }) {
  const [raw, setRaw] = useState(false);
  const call = marks.callNumber.get(span.span_id);
  const creditedTo = marks.creditedTo.get(span.span_id);
  const rewards = marks.rewardsOf.get(span.span_id);
  return (
    <div class="span-detail" aria-live="polite">
      <h3>{span.name}</h3>
      <dl>
        <dt>Span</dt>
        <dd class="mono">{span.span_id}</dd>
        <dt>Trace</dt>
        <dd class="mono">{span.trace_id}</dd>
        <dt>Status</dt>
        <dd>
          {span.status.status_code}
          {span.status.description ? `: ${span.status.description}` : ''}
        </dd>
        <dt>Started</dt>
        <dd>{formatTime(span.start_time)}</dd>
        <dt>Duration</dt>
        <dd>{formatDuration((span.end_time ?? Number.NaN) - (span.start_time ?? Number.NaN))}</dd>
        {call ? (
          <>
            <dt>LLM call</dt>
            <dd>
              <a href={`#call-${span.span_id}`}>call {call}, as chat below</a>
            </dd>
          </>
        ) : null}
        {rewards ? (
          <>
            <dt>Rewards</dt>
            <dd>
              {rewards.map((r) => `${r.name} = ${formatNumber(r.value)}`).join(', ')}
              {creditedTo
                ? `; credited to LLM call ${marks.callNumber.get(creditedTo)}`
                : '; credited to no call (none ended before it)'}
            </dd>
          </>
        ) : null}
      </dl>
      <button type="button" aria-expanded={raw} onClick={() => setRaw(!raw)}>
        {raw ? 'Hide' : 'Show'} raw span JSON
      </button>
      {raw ? <pre class="json">{prettyJson(span)}</pre> : null}
    </div>
  );
}
