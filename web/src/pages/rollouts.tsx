/**
 * Rollouts: filtered, sorted and paged by the store (GET /v1/agl/rollouts: in its memory, fast at
 * any size), the page's final rewards in one SQL query over its rollouts' spans; polled live.
 * Filters, sort and page live in the URL.
 */
import { useEffect, useState } from 'preact/hooks';
import {
  type AttemptedRollout,
  type PaginatedResult,
  ROLLOUT_MODES,
  ROLLOUT_STATUSES,
  type Rollout,
  type RolloutMode,
  type RolloutStatus,
} from '../../../src/api/types.js';
import { getJson, sql } from '../api.js';
import { ErrorNote, Freshness, Status } from '../components/common.js';
import { formatDuration, formatNumber, formatTime, oneLine } from '../format.js';
import { useLoaded } from '../poll.js';
import { rolloutRewardsSql, ROLLOUT_SORTS, rolloutsPath, type RolloutFilters, type RolloutSort } from '../queries.js';
import { Link, navigate, type Place, urlOf } from '../router.js';

const PAGE_SIZE = 50;

export interface RolloutRow {
  readonly rollout: Rollout | AttemptedRollout;
  readonly reward: number | undefined;
}

/** The page's list and the final rewards of its rollouts: the two requests the page makes. */
export async function loadRollouts(
  filters: RolloutFilters,
  signal?: AbortSignal,
): Promise<{ rows: RolloutRow[]; total: number }> {
  const page = await getJson<PaginatedResult<Rollout | AttemptedRollout>>(rolloutsPath(filters), signal);
  const ids = page.items.map((r) => r.rollout_id);
  const rewards = new Map<string, number>();
  if (ids.length > 0) {
    const { rows } = await sql<{ rollout_id: string; reward: number }>(rolloutRewardsSql(ids), signal);
    for (const row of rows) rewards.set(row.rollout_id, row.reward);
  }
  return {
    rows: page.items.map((rollout) => ({ rollout, reward: rewards.get(rollout.rollout_id) })),
    total: page.total,
  };
}

function filtersOf(place: Place): RolloutFilters {
  const q = place.query;
  const status = q.get('status') as RolloutStatus | null;
  const mode = q.get('mode') as RolloutMode | null;
  const sort = q.get('sort') as RolloutSort | null;
  return {
    status: status && ROLLOUT_STATUSES.includes(status) ? status : undefined,
    mode: mode && ROLLOUT_MODES.includes(mode) ? mode : undefined,
    text: q.get('q') ?? undefined,
    sort: sort && ROLLOUT_SORTS.includes(sort) ? sort : 'start_time',
    order: q.get('order') === 'asc' ? 'asc' : 'desc',
    offset: Math.max(0, Number(q.get('offset')) || 0),
    limit: PAGE_SIZE,
  };
}

function urlWith(filters: RolloutFilters, change: Partial<RolloutFilters>): string {
  const next = { ...filters, offset: 0, ...change };
  return urlOf('/', {
    status: next.status,
    mode: next.mode,
    q: next.text,
    sort: next.sort === 'start_time' ? undefined : next.sort,
    order: next.order === 'desc' ? undefined : next.order,
    offset: next.offset || undefined,
  });
}

export function RolloutsPage({ place }: { place: Place }) {
  const filters = filtersOf(place);
  const [live, setLive] = useState(true);
  const key = JSON.stringify(filters);
  const loaded = useLoaded((signal) => loadRollouts(filters, signal), [key], live);
  const total = loaded.data?.total ?? 0;
  return (
    <main id="main" class="page">
      <div class="page-head">
        <h1>Rollouts</h1>
        <Freshness at={loaded.at} loading={loaded.loading} live={live} />
        <label class="inline">
          <input type="checkbox" checked={live} onChange={(e) => setLive(e.currentTarget.checked)} /> Live updates
        </label>
      </div>
      <Filters filters={filters} />
      <ErrorNote error={loaded.error} />
      <RolloutTable rows={loaded.data?.rows ?? []} filters={filters} />
      <Pager filters={filters} total={total} shown={loaded.data?.rows.length ?? 0} />
    </main>
  );
}

function Filters({ filters }: { filters: RolloutFilters }) {
  const [text, setText] = useState(filters.text ?? '');
  // Back and Forward change the URL's text: the field follows.
  useEffect(() => setText(filters.text ?? ''), [filters.text]);
  // Typing filters after a pause, without a Back step per key.
  useEffect(() => {
    if (text === (filters.text ?? '')) return;
    const timer = setTimeout(() => navigate(urlWith(filters, { text: text || undefined }), { replace: true }), 300);
    return () => clearTimeout(timer);
  }, [text, filters]);
  return (
    <search>
      <form class="filters" aria-label="Filter rollouts" onSubmit={(e) => e.preventDefault()}>
        <label>
          Status
          <select
            name="status"
            value={filters.status ?? ''}
            onChange={(e) =>
              navigate(urlWith(filters, { status: (e.currentTarget.value || undefined) as RolloutStatus }))
            }
          >
            <option value="">any</option>
            {ROLLOUT_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Mode
          <select
            name="mode"
            value={filters.mode ?? ''}
            onChange={(e) => navigate(urlWith(filters, { mode: (e.currentTarget.value || undefined) as RolloutMode }))}
          >
            <option value="">any</option>
            {ROLLOUT_MODES.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
        <label class="grow">
          Input contains
          <input
            type="search"
            name="q"
            value={text}
            placeholder="text in the task input"
            onInput={(e) => setText(e.currentTarget.value)}
          />
        </label>
      </form>
    </search>
  );
}

const COLUMNS: { label: string; sort?: RolloutSort; className?: string }[] = [
  { label: 'Rollout', sort: 'rollout_id' },
  { label: 'Status', sort: 'status' },
  { label: 'Mode', sort: 'mode' },
  { label: 'Resources', sort: 'resources_id' },
  { label: 'Attempts', className: 'num' },
  { label: 'Final reward', className: 'num' },
  { label: 'Duration', className: 'num' },
  { label: 'Worker' },
  { label: 'Started', sort: 'start_time' },
  { label: 'Input' },
];

function RolloutTable({ rows, filters }: { rows: RolloutRow[]; filters: RolloutFilters }) {
  return (
    <div class="table-scroll">
      <table class="data rollouts">
        <caption class="visually-hidden">Rollouts; sortable columns have buttons in their headers</caption>
        <thead>
          <tr>
            {COLUMNS.map((c) => (
              <SortHeader key={c.label} column={c} filters={filters} />
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <RolloutLine key={row.rollout.rollout_id} row={row} />
          ))}
        </tbody>
      </table>
      {rows.length === 0 ? <p class="empty">No rollouts match.</p> : null}
    </div>
  );
}

function SortHeader({ column, filters }: { column: (typeof COLUMNS)[number]; filters: RolloutFilters }) {
  if (!column.sort)
    return (
      <th scope="col" class={column.className}>
        {column.label}
      </th>
    );
  const active = filters.sort === column.sort;
  const next = active && filters.order === 'desc' ? 'asc' : 'desc';
  return (
    <th scope="col" aria-sort={active ? (filters.order === 'asc' ? 'ascending' : 'descending') : undefined}>
      <button type="button" class="sort" onClick={() => navigate(urlWith(filters, { sort: column.sort, order: next }))}>
        {column.label}
        <span aria-hidden="true">{active ? (filters.order === 'asc' ? ' ▲' : ' ▼') : ' ↕'}</span>
      </button>
    </th>
  );
}

function RolloutLine({ row }: { row: RolloutRow }) {
  const r = row.rollout;
  const attempt = 'attempt' in r ? r.attempt : undefined;
  const end = r.end_time ?? (r.status === 'running' || r.status === 'preparing' ? Date.now() / 1000 : null);
  return (
    <tr>
      <td>
        <Link href={`/rollouts/${encodeURIComponent(r.rollout_id)}`} class="mono">
          {r.rollout_id}
        </Link>
      </td>
      <td>
        <Status value={r.status} />
      </td>
      <td>{r.mode ?? '—'}</td>
      <td class="mono">{r.resources_id ?? '—'}</td>
      <td class="num">{attempt?.sequence_id ?? 0}</td>
      <td class="num">{formatNumber(row.reward)}</td>
      <td class="num">{end === null ? '—' : formatDuration(end - r.start_time)}</td>
      <td class="mono">{attempt?.worker_id ?? '—'}</td>
      <td class="nowrap">{formatTime(r.start_time)}</td>
      <td class="input-cell" title={oneLine(r.input, 1000)}>
        {oneLine(r.input, 80)}
      </td>
    </tr>
  );
}

function Pager({ filters, total, shown }: { filters: RolloutFilters; total: number; shown: number }) {
  const first = total === 0 ? 0 : filters.offset + 1;
  const last = filters.offset + shown;
  return (
    <nav class="pager" aria-label="Pages of rollouts">
      <button
        type="button"
        disabled={filters.offset === 0}
        onClick={() => navigate(urlWith(filters, { offset: Math.max(0, filters.offset - filters.limit) }))}
      >
        ← Previous
      </button>
      <span>
        {first.toLocaleString()}–{last.toLocaleString()} of {total.toLocaleString()}
      </span>
      <button
        type="button"
        disabled={last >= total}
        onClick={() => navigate(urlWith(filters, { offset: filters.offset + filters.limit }))}
      >
        Next →
      </button>
    </nav>
  );
}
