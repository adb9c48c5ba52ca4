import type { QueryResult } from '../api/query.js';

export type OutputFormat = 'table' | 'csv' | 'json' | 'ndjson';

/** Renders a query result for a terminal or a pipe. */
export function formatResult(result: QueryResult, format: OutputFormat): string {
  switch (format) {
    case 'json':
      return `${JSON.stringify(result.rows, null, 2)}\n`;
    case 'ndjson':
      return result.rows.map((row) => `${JSON.stringify(row)}\n`).join('');
    case 'csv':
      return [
        result.columns.map((c) => csvCell(c.name)),
        ...result.rows.map((row) => result.columns.map((c) => csvCell(text(row[c.name])))),
      ]
        .map((cells) => `${cells.join(',')}\r\n`)
        .join('');
    case 'table':
      return table(result);
  }
}

const MAX_CELL = 60;

function table({ columns, rows }: QueryResult): string {
  const header = columns.map((c) => c.name);
  const cells = rows.map((row) =>
    columns.map((c) => clip(row[c.name] === null || row[c.name] === undefined ? 'NULL' : text(row[c.name]))),
  );
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => r[i].length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]))
      .join(' │ ')
      .trimEnd();
  const rule = widths.map((w) => '─'.repeat(w)).join('─┼─');
  const footer = `(${rows.length} row${rows.length === 1 ? '' : 's'})`;
  return `${[line(header), rule, ...cells.map(line), footer].join('\n')}\n`;
}

function text(value: unknown): string {
  if (value === null || value === undefined) return '';
  return typeof value === 'object' ? JSON.stringify(value) : String(value);
}

function clip(value: string): string {
  const flat = value.replace(/\s+/g, ' ');
  return flat.length > MAX_CELL ? `${flat.slice(0, MAX_CELL - 1)}…` : flat;
}

function csvCell(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}
