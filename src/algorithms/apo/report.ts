import type { APOResult } from './search.js';
import type { Candidate, Cost } from './record.js';
import { formatScore, textTable } from '../shared/report-text.js';
import { formatDifference } from '../eval/index.js';
import { wordDiff } from '../shared/word-diff.js';

/**
 * The end of an APO run as text: the versions with their scores, the best prompt against the
 * seed (paired difference on the validation tasks, and the word diff), and what the search cost.
 */
export function formatApoReport(result: APOResult): string {
  const lines = [
    `APO run ${result.runId}: ${result.rounds} round${result.rounds === 1 ? '' : 's'} completed; stopped: ${result.stopReason}`,
    '',
    textTable(
      ['version', 'round', 'parent', 'batch', 'val', 'status', 'prompt'],
      result.candidates.map((c) => versionRow(c, result)),
    ),
    '',
    `seed score  ${formatScore(result.seed.valScore)}  (${result.seed.version}, all validation tasks)`,
    `best score  ${formatScore(result.best.valScore)}  (${result.best.version})`,
    ...(result.improvement ? formatDifference('seed', 'best', result.improvement, 'validation tasks') : []),
    '',
    ...bestPrompts(result),
    '',
    'cost:',
    textTable(
      ['round', 'rollouts', 'critic tokens', 'editor tokens', 'seconds', 'waiting on rollouts', 'on critic/editor'],
      [...result.cost.rounds.map((c) => costRow(String(c.round), c)), costRow('total', result.cost.total)],
    ),
  ];
  return `${lines.join('\n')}\n`;
}

/** The best prompt and its diff against the seed; with several components, each one's. */
function bestPrompts(result: APOResult): string[] {
  const { seed, best, components } = result;
  if (components.length === 1)
    return [
      'best prompt:',
      indent(best.template),
      '',
      best.version === seed.version
        ? 'the best prompt is the seed: no change'
        : `changes against the seed ([-removed-] {+added+}):\n${indent(wordDiff(seed.template, best.template))}`,
    ];
  return components.flatMap((name) => {
    const [before, after] = [seed.templates[name], best.templates[name]];
    return [
      `best ${name} prompt:`,
      indent(after),
      before === after ? '  (as the seed)' : `changes against the seed:\n${indent(wordDiff(before, after))}`,
    ];
  });
}

function versionRow(c: Candidate, result: APOResult): string[] {
  const tags = [
    c.parent === null ? 'seed' : '',
    c.version === result.best.version ? 'best' : '',
    result.beam.includes(c.version) && c.version !== result.best.version ? 'beam' : '',
    c.rejected ? `rejected: ${c.rejected}` : '',
  ].filter(Boolean);
  return [
    c.version,
    String(c.round),
    c.parent ?? '-',
    formatScore(c.batchScore),
    formatScore(c.valScore),
    tags.join(', ') || '-',
    // With several components, which one the version changed.
    result.components.length > 1 ? `${c.component ?? 'seed'}: ${clip(c.template, 60)}` : clip(c.template, 72),
  ];
}

function costRow(label: string, c: Cost): string[] {
  return [
    label,
    String(c.rollouts),
    String(c.criticTokens),
    String(c.editorTokens),
    c.seconds.toFixed(1),
    c.rolloutSeconds.toFixed(1),
    c.modelSeconds.toFixed(1),
  ];
}

const indent = (text: string) =>
  text
    .split('\n')
    .map((line) => `  ${line}`)
    .join('\n');

function clip(text: string, chars: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > chars ? `${flat.slice(0, chars - 1)}…` : flat;
}
