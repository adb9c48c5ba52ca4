import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatReport, runFuzz } from './run.js';

// A short fuzz run with a fixed seed (npm run fuzz runs longer, see test/fuzz/main.ts): mutated
// OTLP protobuf and JSON, random REST bodies for every store route and random SQL for the query
// route. Every answer is a 2xx or 4xx, and every view, query format and export still reads the
// whole database: checked after every 50 cases of a target (a broken store stays broken, and a
// failed check replays the cases on fresh databases to name the one to blame), which keeps the
// run at about 30 s on two busy cores; npm run fuzz checks after each case.
test('no fuzzed OTLP, REST or SQL request gets a 5xx or leaves the store unreadable', async () => {
  const reports = await runFuzz({ runs: 200, seed: 20_2026, checkEvery: 50, maxShrinks: 10 });
  const text = formatReport(reports);
  assert.equal(
    reports.reduce((sum, r) => sum + r.broken, 0),
    0,
    text,
  );
});

test('the feedback target run alone records calls to name: not every case is refused', async () => {
  const [report] = await runFuzz({ runs: 40, seed: 7, targets: ['feedback'], checkEvery: 50, maxShrinks: 10 });
  assert.equal(report.broken, 0, formatReport([report]));
  assert.ok(report.rejected < report.tried, `${report.rejected} of ${report.tried} cases refused`);
});
