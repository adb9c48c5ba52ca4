import { parseArgs } from 'node:util';
import { postgresOutage, type OutageReport } from '../test/support/postgres-outage.js';

// The long PostgreSQL outage (issue 45): `scripts/postgres-outage.sh [--outage-seconds 30]`.
// The same scenario as test/store/postgres-outage.test.ts, with the outage as long as asked,
// and what it showed printed instead of asserted.

function summary(report: OutageReport): Record<string, unknown> {
  const attempts = [...report.attempts.values()];
  const ended = [...report.statuses.values()];
  return {
    database: report.database,
    outageSeconds: report.outageSeconds,
    unresponsiveSeconds: report.unresponsiveSeconds,
    rollouts: report.rollouts,
    finishedBeforeTheOutage: report.finishedBefore,
    duringTheOutage: { enqueue: report.enqueue, query: report.query, health: report.health },
    spansOfNoRolloutDuringTheOutage: { statuses: report.spanStatuses, stored: report.spansStored },
    secondsFromStartToAllFinished: report.recoverySeconds,
    rolloutsSucceeded: ended.filter((status) => status === 'succeeded').length,
    rolloutsWithTwoSucceededAttempts: attempts.filter((a) => a.filter((s) => s === 'succeeded').length > 1).length,
    attemptsLeftClaimed: attempts.flat().filter((s) => s === 'preparing' || s === 'running').length,
    attemptsUnresponsive: attempts.flat().filter((s) => s === 'unresponsive').length,
    runnerLines: report.runnerLines,
    runnerExitCodes: report.runnerCodes,
    listenWokeAfterTheOutage: report.listenWoke,
    serversAlive: report.serversAlive,
    serverLines: report.serverOutputs.map((output) =>
      output.split('\n').filter((line) => /PostgreSQL|error/i.test(line)),
    ),
  };
}

const { values } = parseArgs({ options: { 'outage-seconds': { type: 'string', default: '30' } } });
const outageSeconds = Number(values['outage-seconds']);
if (!(outageSeconds > 0)) {
  console.error(`postgres-outage: --outage-seconds must be a number above 0, not "${values['outage-seconds']}"`);
  process.exit(2);
}
const cleanups: (() => unknown)[] = [];
try {
  const report = await postgresOutage((fn) => cleanups.push(fn), { outageSeconds });
  console.log(JSON.stringify(summary(report), null, 2));
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup();
}
