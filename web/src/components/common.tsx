/** Small pieces every page uses. */
import type { ComponentChildren } from 'preact';
import { formatNumber, oneLine } from '../format.js';

/** A status as a coloured word (colour is never the only cue: the word is there). */
export function Status({ value }: { value: string | null | undefined }) {
  const text = value ?? 'none';
  return <span class={`status status-${text}`}>{text}</span>;
}

export function ErrorNote({ error }: { error: string | undefined }) {
  return error ? (
    <p class="error" role="alert">
      {error}
    </p>
  ) : null;
}

/** "live · updated 12:00:01" (or "updated ..." when not polled), read out politely by screen readers when it changes. */
export function Freshness({ at, loading, live }: { at: number | undefined; loading: boolean; live: boolean }) {
  const text = at ? `${live ? 'live · ' : ''}updated ${new Date(at).toLocaleTimeString()}` : loading ? 'loading…' : '';
  return (
    <span class="freshness" aria-live="polite">
      {text}
    </span>
  );
}

export function Section({ title, children, id }: { title: string; children: ComponentChildren; id?: string }) {
  return (
    <section class="panel" aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {children}
    </section>
  );
}

/** One cell of a query result: numbers aligned, JSON on one line (the whole value in its title). */
export function Cell({ value }: { value: unknown }) {
  if (typeof value === 'number') return <td class="num">{formatNumber(value, 6)}</td>;
  if (value === null || value === undefined) return <td class="null">NULL</td>;
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return <td title={text.length > 200 ? text.slice(0, 2000) : undefined}>{oneLine(text, 200)}</td>;
}

/** A query result as a table, the first `max` rows. */
export function ResultTable({
  columns,
  rows,
  max = 1000,
  caption,
}: {
  columns: { name: string; type: string }[];
  rows: Record<string, unknown>[];
  max?: number;
  caption?: string;
}) {
  return (
    <div class="table-scroll">
      <table class="data">
        {caption ? <caption>{caption}</caption> : null}
        <thead>
          <tr>
            {columns.map((c) => (
              <th scope="col" key={c.name}>
                {c.name} <span class="type">{c.type}</span>
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.slice(0, max).map((row, i) => (
            // biome-ignore lint/suspicious/noArrayIndexKey: result rows have no identity
            <tr key={i}>
              {columns.map((c) => (
                <Cell key={c.name} value={row[c.name]} />
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
