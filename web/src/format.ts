/** How numbers, times and JSON values read on the pages. */

const dateTime = new Intl.DateTimeFormat(undefined, {
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hourCycle: 'h23',
});

/** Epoch seconds as a local date and time (Dec 1, 16:16:23); an em dash for none. */
export const formatTime = (seconds: number | null | undefined): string =>
  seconds === null || seconds === undefined ? '—' : dateTime.format(new Date(seconds * 1000));

/** A span of seconds: 850 ms, 12.3 s, 4 min 05 s, 2 h 10 min. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${String(Math.floor(seconds % 60)).padStart(2, '0')} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

/** How long ago, from now: 3 s ago, 5 min ago. */
export const formatAgo = (seconds: number | null | undefined, now = Date.now() / 1000): string =>
  seconds === null || seconds === undefined ? '—' : `${formatDuration(Math.max(0, now - seconds))} ago`;

/** A number with at most `digits` decimals; an em dash for none. */
export function formatNumber(value: unknown, digits = 3): string {
  if (value === null || value === undefined || value === '') return '—';
  if (typeof value !== 'number') return String(value);
  return Number.isInteger(value) ? value.toLocaleString() : value.toFixed(digits).replace(/\.?0+$/, '');
}

/** Any JSON value on one line, cut to `max` characters. */
export function oneLine(value: unknown, max = 120): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export const prettyJson = (value: unknown): string => JSON.stringify(value, null, 2) ?? String(value);
