import { formatRunCost } from '../shared/cost-clock.js';
import { textTable } from '../shared/report-text.js';
import type { Interval, PairedDifference } from './statistics.js';
import type { EvalResult, PairSummary, VariantSummary } from './summary.js';

/**
 * An evaluation as text for the terminal (`text`) or as Markdown (`md`): the variants with their
 * intervals, then each pair's paired difference, said plainly when it is no detectable one.
 */
export function formatEvalReport(result: EvalResult, format: 'text' | 'md' = 'text'): string {
  const table = format === 'md' ? markdownTable : textTable;
  const lines = [
    `${format === 'md' ? '# ' : ''}Evaluation ${result.runId}: ${result.variants.length} variants, ${result.tasks} tasks x ${result.samples} sample${result.samples === 1 ? '' : 's'}, seed ${result.seed}`,
    '',
    table(
      ['variant', 'mean reward', '95% interval', 'success', '95% interval', 'failed', 'tokens/task', 's/rollout'],
      result.variants.map(variantRow),
    ),
  ];
  for (const v of result.variants)
    if (v.failed > 0)
      lines.push(
        '',
        `${v.name}: ${v.failed} of ${v.rollouts} rollouts failed and are left out of its scores (${Object.entries(
          v.failures,
        )
          .map(([why, n]) => `${n} ${why}`)
          .join(', ')})`,
      );
  lines.push('', formatRunCost(result.cost));
  if (result.pairs.length) lines.push('', `${format === 'md' ? '## ' : ''}Paired differences (same tasks)`);
  for (const pair of result.pairs) lines.push('', ...pairLines(pair, format));
  return `${lines.join('\n')}\n`;
}

const fixed = (x: number) => x.toFixed(3);
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(3)}`;
const range = (i: Interval, show = fixed) => `[${show(i.low)}, ${show(i.high)}]`;
const percent = (x: number) => `${Math.round(100 * x)}%`;

function variantRow(v: VariantSummary): string[] {
  return [
    v.name,
    v.mean ? fixed(v.mean.mean) : '-',
    v.mean ? range(v.mean) : '-',
    v.success ? percent(v.success.rate) : '-',
    v.success ? range(v.success, percent) : '-',
    `${v.failed}/${v.rollouts}`,
    v.tokensPerTask.toFixed(0),
    v.secondsPerRollout === null ? '-' : v.secondsPerRollout.toFixed(2),
  ];
}

function pairLines(pair: PairSummary, format: 'text' | 'md'): string[] {
  const d = pair.difference;
  if (!d) return [`${pair.b} - ${pair.a}: no task that both scored`];
  const lines = formatDifference(pair.a, pair.b, d);
  if (pair.changed.length) {
    lines.push(`  tasks that changed most:`);
    for (const t of pair.changed)
      lines.push(
        `  ${format === 'md' ? '- ' : '  '}task ${t.task}: ${fixed(t.a)} -> ${fixed(t.b)} (${signed(t.change)}) ${clip(JSON.stringify(t.input), 60)}`,
      );
  }
  return lines;
}

/**
 * `d`, the paired difference b - a, as a line and a verdict said plainly (no detectable
 * difference, not established, or which is better); other algorithms' reports use it too.
 */
export function formatDifference(a: string, b: string, d: PairedDifference, tasks = 'tasks'): string[] {
  const lines = [
    `${b} - ${a}: ${signed(d.mean)} ${range(d, signed)} over ${d.tasks} ${tasks}, p ${d.pValue < 0.001 ? '< 0.001' : `= ${d.pValue.toFixed(3)}`}`,
  ];
  const needed =
    d.tasksNeeded === null ? '' : `; about ${d.tasksNeeded} tasks would detect a difference of ${signed(d.mean)}`;
  if (d.includesZero) lines.push(`  no detectable difference at this sample size${needed}`);
  else if (!d.detected)
    lines.push(
      `  not established: the interval excludes 0 but the paired test does not (too few tasks changed)${needed}`,
    );
  else lines.push(`  ${d.mean > 0 ? b : a} is better: the interval excludes 0 and p < 0.05`);
  return lines;
}

function clip(text: string, chars: number): string {
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]) => `| ${cells.map((c) => c.replaceAll('|', '\\|')).join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}
