import { wordDiff } from '../shared/word-diff.js';
import { formatScore, textTable } from '../shared/report-text.js';
import { valScoreOf, type GepaCandidate } from './record.js';
import type { GEPAResult } from './search.js';

/**
 * The end of a GEPA run as text: the candidates with the components they changed and their
 * scores, the best against the seed as a paired difference, its prompts with their diffs, and
 * what the search cost.
 */
export function formatGepaReport(result: GEPAResult): string {
  const d = result.difference;
  const lines = [
    `GEPA run ${result.runId}: ${result.iterations} iteration${result.iterations === 1 ? '' : 's'} completed over ${result.components.join(', ')}; stopped: ${result.stopReason}`,
    '',
    textTable(
      ['version', 'iteration', 'kind', 'parents', 'changed', 'minibatch', 'val', 'status'],
      result.candidates.map((c) => row(c, result)),
    ),
    '',
    `seed score  ${formatScore(valScoreOf(result.seed))}  (${result.seed.version}, all validation tasks)`,
    `best score  ${formatScore(valScoreOf(result.best))}  (${result.best.version})`,
    d
      ? `best - seed  ${d.mean >= 0 ? '+' : ''}${d.mean.toFixed(3)}  95% interval [${d.low.toFixed(3)}, ${d.high.toFixed(3)}] over ${d.tasks} tasks, p = ${d.pValue.toFixed(3)}`
      : 'best - seed  -',
    '',
    ...result.components.flatMap((name) => {
      const [before, after] = [result.seed.templates[name], result.best.templates[name]];
      return [
        `${name}:`,
        before === after ? '  (as the seed)' : `  ${wordDiff(before, after).split('\n').join('\n  ')}`,
      ];
    }),
    '',
    `cost: ${result.cost.total.rollouts} rollouts, ${result.cost.total.reflectionTokens} reflection tokens, ${result.cost.total.seconds.toFixed(1)} s (waiting: rollouts ${result.cost.total.rolloutSeconds.toFixed(1)} s, reflection ${result.cost.total.modelSeconds.toFixed(1)} s)`,
  ];
  return `${lines.join('\n')}\n`;
}

function row(c: GepaCandidate, result: GEPAResult): string[] {
  const tags = [
    c.kind === 'seed' ? 'seed' : '',
    c.version === result.best.version ? 'best' : '',
    result.frontier.includes(c.version) ? 'frontier' : '',
    c.rejected ? `rejected: ${c.rejected}` : '',
  ].filter(Boolean);
  return [
    c.version,
    String(c.iteration),
    c.kind,
    c.parents.join('+') || '-',
    c.components.join(', ') || '-',
    `${formatScore(c.parentBatchScore)} -> ${formatScore(c.batchScore)}`,
    formatScore(valScoreOf(c)),
    tags.join(', ') || '-',
  ];
}
