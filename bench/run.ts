import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { meets, type Benchmark, type Figure } from './figures.js';
import { decode } from './decode.js';
import { ingest } from './ingest.js';
import { adapters } from './adapters.js';
import { apo } from './apo.js';
import { dashboard } from './dashboard.js';
import { gateway } from './gateway.js';
import { grpo } from './grpo.js';
import { instrumentation } from './instrumentation.js';
import { runtime } from './runtime.js';
import { store } from './store.js';
import { scaleOut } from './scale-out.js';
import { spansDir } from './spans-dir.js';

/** Every benchmark of `npm run bench`, in run order. Later issues add theirs here. */
const BENCHMARKS: Benchmark[] = [
  ingest,
  decode,
  store,
  scaleOut,
  spansDir,
  instrumentation,
  gateway,
  adapters,
  runtime,
  apo,
  grpo,
  dashboard,
];

const { values } = parseArgs({
  options: { json: { type: 'string', default: 'bench-results.json' }, only: { type: 'string' } },
});
const selected = values.only ? BENCHMARKS.filter((b) => b.name === values.only) : BENCHMARKS;
if (selected.length === 0) {
  console.error(`agl bench: no benchmark "${values.only}"; there are: ${BENCHMARKS.map((b) => b.name).join(', ')}`);
  process.exit(2);
}

const figures: Figure[] = [];
for (const benchmark of selected) {
  console.error(`running ${benchmark.name}: ${benchmark.description}`);
  figures.push(...(await benchmark.run()));
}

const rows = figures.map((f) => [
  f.name,
  String(f.value),
  f.unit,
  f.target || '-',
  f.target ? (meets(f) ? 'ok' : 'MISSED') : '',
]);
const header = ['figure', 'value', 'unit', 'target', ''];
const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
for (const row of [header, ...rows])
  console.log(
    row
      .map((cell, i) => (i === 1 ? cell.padStart(widths[i]) : cell.padEnd(widths[i])))
      .join('  ')
      .trimEnd(),
  );

await writeFile(
  values.json,
  JSON.stringify({ date: new Date().toISOString(), node: process.version, figures }, null, 2),
);
console.error(`wrote ${values.json}`);
