import { rename, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { meets, type Benchmark, type Figure, type Size } from './figures.js';
import { decode } from './decode.js';
import { ingest } from './ingest.js';
import { adapters } from './adapters.js';
import { apo } from './apo.js';
import { promptOptimizers } from './prompt-optimizers.js';
import { dashboard } from './dashboard.js';
import { gateway } from './gateway.js';
import { grpo } from './grpo.js';
import { instrumentation } from './instrumentation.js';
import { runtime } from './runtime.js';
import { store } from './store.js';
import { trl } from './trl.js';
import { scaleOut } from './scale-out.js';
import { spansDir } from './spans-dir.js';
import { alV1 } from './al-v1.js';
import { soak } from './soak.js';

/** Every benchmark of `npm run bench`, in run order. Later issues add theirs here. */
const BENCHMARKS: Benchmark[] = [
  ingest,
  decode,
  store,
  scaleOut,
  spansDir,
  instrumentation,
  gateway,
  alV1,
  adapters,
  runtime,
  apo,
  promptOptimizers,
  grpo,
  trl,
  dashboard,
  soak,
];

interface Failure {
  readonly benchmark: string;
  readonly error: string;
}

function options(): { json: string | undefined; only: string | undefined; size: Size } {
  try {
    const { values } = parseArgs({
      options: { json: { type: 'string' }, only: { type: 'string' }, smoke: { type: 'boolean', default: false } },
    });
    const size = values.smoke ? 'smoke' : 'full';
    // A smoke run's figures measure nothing: they go to a file only when asked.
    return { json: values.json ?? (size === 'full' ? 'bench-results.json' : undefined), only: values.only, size };
  } catch (error) {
    console.error(`agl bench: ${(error as Error).message}; options: --only NAME[,NAME...] --json FILE --smoke`);
    process.exit(2);
  }
}

function selected(only: string | undefined): Benchmark[] {
  if (only === undefined) return BENCHMARKS;
  const names = only.split(',').map((name) => name.trim());
  const unknown = names.filter((name) => !BENCHMARKS.some((b) => b.name === name));
  if (unknown.length > 0) {
    console.error(
      `agl bench: no benchmark "${unknown.join('", "')}"; there are: ${BENCHMARKS.map((b) => b.name).join(', ')}`,
    );
    process.exit(2);
  }
  return BENCHMARKS.filter((b) => names.includes(b.name));
}

function printTable(figures: readonly Figure[]): void {
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
}

const { json, only, size } = options();
const figures: Figure[] = [];
const failures: Failure[] = [];
const date = new Date().toISOString();

/** Written after every benchmark, through a rename: a later crash cannot take what is written. */
async function save(): Promise<void> {
  if (json === undefined) return;
  const text = JSON.stringify({ date, node: process.version, size, figures, failures }, null, 2);
  await writeFile(`${json}.tmp`, text);
  await rename(`${json}.tmp`, json);
}

let running = '';

function fail(benchmark: string, error: unknown): void {
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  failures.push({ benchmark, error: message });
  console.error(`${benchmark} FAILED: ${message}`);
}

// An error no benchmark awaited (a stray callback's) is the running one's failure; what the
// others measured stays written.
process.on('uncaughtException', async (error) => {
  fail(running, `uncaught: ${error.stack ?? error.message}`);
  await save();
  process.exit(1);
});
// A benchmark waiting on nothing that can still happen (a child that died unnoticed) would end
// the process (code 13) with no word of which it was: it fails, and the next one runs.
let stall: (error: Error) => void = () => {};
process.on('beforeExit', () => stall(new Error('stalled: it waits for what can no longer happen')));

for (const benchmark of selected(only)) {
  running = benchmark.name;
  console.error(`running ${benchmark.name}${size === 'smoke' ? ' (smoke size)' : ''}: ${benchmark.description}`);
  const start = performance.now();
  try {
    const stalled = new Promise<never>((_, reject) => {
      stall = reject;
    });
    const measured = await Promise.race([benchmark.run(size), stalled]);
    figures.push(...measured);
    printTable(measured);
    console.error(`  ${benchmark.name} done in ${((performance.now() - start) / 1000).toFixed(1)} s`);
  } catch (error) {
    console.error(`  ${benchmark.name} stopped after ${((performance.now() - start) / 1000).toFixed(1)} s`);
    fail(benchmark.name, error);
  }
  await save();
}

if (json !== undefined) console.error(`wrote ${json}`);
if (failures.length > 0) {
  console.error(`agl bench: ${failures.length} benchmark(s) failed: ${failures.map((f) => f.benchmark).join(', ')}`);
}
// Exit at once: a failed benchmark may have left a server or timer behind.
process.exit(failures.length > 0 ? 1 : 0);
