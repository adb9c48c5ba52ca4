import { parseArgs } from 'node:util';
import { formatReport, runFuzz, TARGETS, type TargetName } from './run.js';

const USAGE = `npm run fuzz -- [--runs N] [--seed S] [--target ${TARGETS.join('|')} ...] [--path P] [--check-every K] [--max-shrinks M] [--keep-going] [--verbose]
  Sends N fuzz cases in all (default 2000, shared by the targets) to an agl server in this process
  and checks after every K cases that every view, query format and export still reads the whole
  database (default: at least every 50 cases, as often as keeps checks to a fifth of the time);
  a failed check replays those cases on fresh databases to name the one to blame. Prints progress every 10 s. Exits 1 when a case broke an invariant, with the case and
  how to replay it.
  --keep-going: go on after failures and list each kind once (no shrinking).
  --verbose: show the server's own log lines.`;

function count(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`--${name} takes a whole number, not "${value}"\n${USAGE}`);
  return n;
}

const { values } = parseArgs({
  options: {
    runs: { type: 'string' },
    seed: { type: 'string' },
    path: { type: 'string' },
    target: { type: 'string', multiple: true },
    'check-every': { type: 'string' },
    'max-shrinks': { type: 'string' },
    'keep-going': { type: 'boolean' },
    verbose: { type: 'boolean' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const targets = values.target as TargetName[] | undefined;
for (const target of targets ?? [])
  if (!TARGETS.includes(target)) throw new Error(`unknown target "${target}"\n${USAGE}`);
const seed = values.seed === undefined ? Date.now() % 2 ** 31 : Number(values.seed);
if (!Number.isSafeInteger(seed)) throw new Error(`--seed takes an integer, not "${values.seed}"`);
const runs = count('runs', values.runs, 2000);
// The server runs in this process: its log lines (a value with invalid Unicode replaced, a
// span the deriver skipped) come by the thousand and hide the progress lines.
if (!values.verbose) console.error = console.warn = () => {};
console.log(`agl fuzz: ${runs} case(s), seed ${seed}, targets ${(targets ?? TARGETS).join(', ')}`);
const started = Date.now();
const reports = await runFuzz({
  runs,
  seed,
  path: values.path,
  targets,
  checkEvery: values['check-every'] === undefined ? undefined : count('check-every', values['check-every'], 0),
  maxShrinks: count('max-shrinks', values['max-shrinks'], 200),
  keepGoing: values['keep-going'],
  onReport: (report) => console.log(formatReport([report])),
  onProgress: (r) =>
    console.log(
      `  ${r.target}: ${r.tried} case(s) so far, ${r.rejected} rejected, ${r.broken} broke an invariant (${r.seconds.toFixed(0)} s, ${(r.tried / Math.max(r.seconds, 0.001)).toFixed(1)} cases/s)`,
    ),
});
const broken = reports.reduce((sum, r) => sum + r.broken, 0);
console.log(
  `${reports.reduce((sum, r) => sum + r.tried, 0)} case(s) in ${((Date.now() - started) / 1000).toFixed(1)} s; ${broken} broke an invariant`,
);
process.exitCode = broken > 0 ? 1 : 0;
