import { readFileSync } from 'node:fs';

/** CPU seconds of a process (Linux /proc), and of its children that ended (`reaped`). */
export function cpuOf(pid: number): { own: number; reaped: number; parent: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = (i: number) => Number(fields[i]) / 100;
  return { parent: Number(fields[1]), own: ticks(11) + ticks(12), reaped: ticks(13) + ticks(14) };
}
