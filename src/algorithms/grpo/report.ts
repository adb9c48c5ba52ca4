import type { GrpoResult } from './grpo.js';
import type { StepRecord } from './record.js';
import { formatRunCost } from '../shared/cost-clock.js';
import { formatScore, textTable } from '../shared/report-text.js';

/**
 * The end of a GRPO run as text: one row per step (its batch, rewards, what was left out, the
 * time the trainer took, the model it gave), then the last model and where the rest is (the
 * `training_steps` view).
 */
export function formatGrpoReport(result: GrpoResult): string {
  const trained = result.steps.filter((s) => s.status === 'trained').length;
  const lines = [
    `GRPO run ${result.runId}: ${trained} step${trained === 1 ? '' : 's'} trained${result.stopped ? '; stopped by a signal (Ctrl-C): the models published so far are kept' : ''}`,
    '',
    textTable(
      ['step', 'status', 'version', 'groups', 'rows', 'tokens', 'mean reward', 'left out', 'trainer s', 'new version'],
      result.steps.map(stepRow),
    ),
    '',
    `final model  ${result.model} at ${result.endpoint} (version ${result.modelVersion}, resources ${result.resourcesId})`,
    formatRunCost(result.cost),
    '',
    `each step's figures: agl query "SELECT * FROM training_steps WHERE run_id = '${result.runId}'"`,
  ];
  return `${lines.join('\n')}\n`;
}

function stepRow(s: StepRecord): string[] {
  const leftOut = Object.values(s.dropped).reduce((a, b) => a + b, 0);
  return [
    String(s.step),
    s.status,
    s.modelVersion,
    String(s.groups),
    String(s.rows),
    String(s.tokens),
    formatScore(s.rewardMean),
    String(leftOut),
    s.trainerSeconds.toFixed(1),
    s.nextModelVersion ?? '-',
  ];
}
