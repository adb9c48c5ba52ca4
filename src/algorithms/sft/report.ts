import { formatRunCost } from '../shared/cost-clock.js';
import { formatScore, textTable } from '../shared/report-text.js';
import type { IterationRecord } from './record.js';
import type { SftResult } from './sft.js';

/**
 * The end of an SFT run as text: one row per iteration (what it scored, kept and trained), then
 * the last model and where the rest is (the `sft_iterations` view).
 */
export function formatSftReport(result: SftResult): string {
  const trained = result.iterations.filter((i) => i.status === 'trained').length;
  const lines = [
    `SFT run ${result.runId}: ${trained} iteration${trained === 1 ? '' : 's'} trained${result.stopped ? '; stopped by a signal (Ctrl-C): the models published so far are kept' : ''}`,
    '',
    textTable(
      ['iteration', 'status', 'mean reward', 'val reward', 'kept', 'records', 'trained model'],
      result.iterations.map((i) => iterationRow(i, result)),
    ),
    '',
    `final model  ${result.model} at ${result.endpoint} (resources ${result.resourcesId})`,
    ...(result.finalValMeanReward === null
      ? []
      : [`validation mean reward  ${formatScore(result.finalValMeanReward)}`]),
    formatRunCost(result.cost),
    '',
    `each iteration's dataset, command and output: agl query "SELECT * FROM sft_iterations WHERE run_id = '${result.runId}'"`,
  ];
  return `${lines.join('\n')}\n`;
}

function iterationRow(i: IterationRecord, result: SftResult): string[] {
  return [
    String(i.iteration),
    i.status,
    formatScore(i.meanReward),
    formatScore(i.valMeanReward),
    i.keptRolloutIds === undefined ? '-' : String(i.keptRolloutIds.length),
    i.records === undefined ? '-' : String(i.records),
    // The evaluation row scored the last model; an iteration's own is the one it published.
    (i.status === 'evaluated' ? result.model : i.model) ?? '-',
  ];
}
