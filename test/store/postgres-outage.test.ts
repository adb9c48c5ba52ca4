import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postgresOutage } from '../support/postgres-outage.js';

// PostgreSQL stopped for a few seconds under two servers and their runners, then started again
// (the scenario: test/support/postgres-outage.ts; scripts/postgres-outage.sh runs 30 s of it).

test('PostgreSQL stopped and started under a fleet: 503s that name it, spans kept, every rollout ends once, LISTEN back', async (t) => {
  // Longer than unresponsive_seconds: the attempts running when it began must not count as silent.
  const report = await postgresOutage((fn) => t.after(fn), { outageSeconds: 6, unresponsiveSeconds: 4 });
  const database = report.database.replace(/\./g, '\\.');
  const names = new RegExp(`the PostgreSQL state at ${database} is unreachable`);

  // While it is gone: calls that need the state answer 503 with Retry-After, naming the database.
  for (const answer of [report.enqueue, report.query]) {
    assert.equal(answer.status, 503, answer.detail);
    assert.match(String(answer.retryAfter), /^\d+$/);
    assert.match(answer.detail, names);
  }
  for (const health of report.health) {
    assert.equal(health.status, 'degraded');
    assert.match(String(health.reason), names);
  }
  // Spans of no rollout are still taken, and are in the file of the server that took them.
  assert.deepEqual(
    report.spanStatuses,
    report.spanStatuses.map(() => 200),
  );
  for (const stored of report.spansStored) assert.equal(stored.found, stored.sent);

  // After it: every rollout ended, once: one succeeded attempt each (an attempt of a dequeue
  // whose answer was lost may be unresponsive before it), none left claimed.
  assert.ok(report.finishedBefore < report.rollouts, 'the outage came in the middle of the work');
  for (const [id, attempts] of report.attempts) {
    assert.equal(report.statuses.get(id), 'succeeded', `${id}: ${attempts}`);
    assert.equal(attempts.filter((status) => status === 'succeeded').length, 1, `${id}: ${attempts}`);
    assert.deepEqual(
      attempts.filter((status) => status === 'preparing' || status === 'running'),
      [],
      `${id}: ${attempts}`,
    );
  }

  // Runners waited and said so in a few lines, not one per retry; Ctrl-C then ended them cleanly.
  for (const [i, lines] of report.runnerLines.entries()) {
    const back = lines.filter((line) => /answers again after \d+\.\d s and \d+ retr/.test(line));
    assert.ok(back.length >= 1, lines.join('\n'));
    assert.ok(lines.length <= 6, lines.join('\n'));
    assert.equal(report.runnerCodes[i], 0, lines.join('\n'));
  }

  assert.ok(report.listenWoke, 'an enqueue on server a woke the long poll on server b');
  assert.ok(report.serversAlive, report.serverOutputs.join('\n'));
  for (const output of report.serverOutputs) {
    assert.doesNotMatch(output, /request failed|internal error|Unhandled|uncaught/i, output);
    assert.match(output, new RegExp(`the PostgreSQL state at ${database} answers again`), output);
  }
});
