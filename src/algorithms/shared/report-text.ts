/** Pieces of the text reports `agl train` prints (apo/report.ts, sft/report.ts). */

/** Rows under a header, each column as wide as its widest cell, two spaces between columns. */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => cell.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** A score or mean reward to three decimals; `-` when there is none. */
export const formatScore = (value: number | null | undefined) =>
  value === null || value === undefined ? '-' : value.toFixed(3);
