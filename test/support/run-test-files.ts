/**
 * Runs test files as `node --test` does, several at a time, each under a time limit: a file
 * that runs past it is killed (its whole process group) and named, with the tests it was in, so
 * that a run that would hang fails in minutes and says where. Each file's spec output is printed
 * whole when it ends (files running side by side do not interleave), then one summary of all.
 *
 *   node dist/test/support/run-test-files.js [--concurrency 4] [--file-timeout 600] PATTERN...
 *
 * (npm test runs the suite through it; node's own multi-file runner once sat at 99% CPU with no
 * test process left, for 12 minutes, until CI killed it.)
 */
import { spawn } from 'node:child_process';
import { glob, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { parseArgs } from 'node:util';

const REPORTER = new URL('./started-tests-reporter.js', import.meta.url).href;
/** After a file's process exited, how long its pipes may stay open (its last lines are in them). */
const DRAIN_MS = 2_000;
const COUNTS = ['tests', 'suites', 'pass', 'fail', 'cancelled', 'skipped', 'todo'] as const;

interface FileResult {
  readonly file: string;
  readonly output: string;
  readonly code: number | null;
  readonly timedOut: boolean;
  /** Tests started and not ended when the file was killed, innermost last. */
  readonly running: string[];
  readonly counts: Partial<Record<(typeof COUNTS)[number], number>>;
}

function options() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { concurrency: { type: 'string', default: '4' }, 'file-timeout': { type: 'string', default: '600' } },
  });
  const concurrency = Number(values.concurrency);
  const timeoutSeconds = Number(values['file-timeout']);
  if (!Number.isInteger(concurrency) || concurrency < 1)
    throw new Error('--concurrency must be a whole number of 1 or more');
  if (!(timeoutSeconds > 0)) throw new Error('--file-timeout must be a number of seconds above 0');
  if (positionals.length === 0) throw new Error('give the test files, or glob patterns of them');
  return { concurrency, timeoutSeconds, patterns: positionals };
}

/** The tests the reporter saw start and not end, outermost first. */
function stillRunning(log: string): string[] {
  const open: string[] = [];
  for (const line of log.split('\n')) {
    const match = /^(start|end) (\d+) (.*)$/.exec(line);
    if (!match) continue;
    const [, kind, nesting, name] = match;
    open.length = Math.min(open.length, Number(nesting));
    if (kind === 'start') open[Number(nesting)] = JSON.parse(name) as string;
  }
  return open.filter(Boolean);
}

/** The `ℹ tests 12` ... lines of node's spec summary. */
function countsOf(output: string): FileResult['counts'] {
  const counts: FileResult['counts'] = {};
  for (const name of COUNTS) {
    const match = new RegExp(`^ℹ ${name} (\\d+)$`, 'm').exec(output);
    if (match) counts[name] = Number(match[1]);
  }
  return counts;
}

async function runFile(file: string, timeoutSeconds: number, dir: string, index: number): Promise<FileResult> {
  const log = join(dir, `${index}.log`);
  const child = spawn(
    process.execPath,
    [
      '--test',
      // The file runs in this process (each file has its own anyway): its reporter hears each test start as it starts.
      '--test-isolation=none',
      '--test-reporter=spec',
      '--test-reporter-destination=stdout',
      `--test-reporter=${REPORTER}`,
      `--test-reporter-destination=${log}`,
      file,
    ],
    // Without NODE_TEST_CONTEXT: under a test runner (this file's own test), the child would report to it instead.
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, NODE_TEST_CONTEXT: undefined } },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  let timedOut = false;
  const kill = (signal: NodeJS.Signals) => {
    try {
      // The group: the file's test process, and whatever it started.
      process.kill(-(child.pid as number), signal);
    } catch {}
  };
  const timer = setTimeout(() => {
    timedOut = true;
    // SIGTERM first: node's runner then prints the tests it was running; SIGKILL if it cannot.
    kill('SIGTERM');
    setTimeout(() => kill('SIGKILL'), 5_000).unref();
  }, timeoutSeconds * 1000);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (exitCode) => resolve(exitCode)));
  clearTimeout(timer);
  // Not 'close': a process the file started outside its group (detached) that inherited the
  // pipes holds them open after the file's end, and the run would wait on it for ever.
  const drained = await Promise.race([
    Promise.all([child.stdout, child.stderr].map((stream) => finished(stream).catch(() => {}))).then(() => true),
    new Promise<false>((resolve) => setTimeout(() => resolve(false), DRAIN_MS)),
  ]);
  if (!drained) {
    child.stdout.destroy();
    child.stderr.destroy();
    output += `\n✖ ${file} left a process running that holds its output open; not waited for\n`;
  }
  const running = timedOut ? stillRunning(await readFile(log, 'utf8').catch(() => '')) : [];
  return { file, output, code, timedOut, running, counts: countsOf(output) };
}

async function main(): Promise<number> {
  const { concurrency, timeoutSeconds, patterns } = options();
  const files = new Set<string>();
  for (const pattern of patterns) for await (const file of glob(pattern)) files.add(file);
  if (files.size === 0) throw new Error(`no test file matches ${patterns.join(' ')}`);
  const queue = [...files].sort();
  const dir = await mkdtemp(join(tmpdir(), 'agl-test-files-'));
  const started = performance.now();
  const results: FileResult[] = [];
  let runs = 0;
  try {
    await Promise.all(
      Array.from({ length: Math.min(concurrency, queue.length) }, async () => {
        for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
          const result = await runFile(file, timeoutSeconds, dir, runs++);
          results.push(result);
          process.stdout.write(result.output);
          if (result.timedOut) {
            const doing =
              result.running.length > 0
                ? `in ${result.running.map((n) => JSON.stringify(n)).join(' > ')}`
                : 'before its first test';
            console.log(`✖ ${file} ran past ${timeoutSeconds} s and was killed, ${doing}`);
          }
        }
      }),
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const failed = results.filter((r) => r.timedOut || r.code !== 0);
  console.log(`ℹ files ${results.length}`);
  for (const name of COUNTS) console.log(`ℹ ${name} ${results.reduce((sum, r) => sum + (r.counts[name] ?? 0), 0)}`);
  console.log(`ℹ duration_ms ${Math.round(performance.now() - started)}`);
  for (const r of failed)
    console.log(`✖ failed: ${r.file}${r.timedOut ? ` (killed after ${timeoutSeconds} s)` : ` (exit ${r.code})`}`);
  return failed.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`run-test-files: ${(error as Error).message}`);
    process.exit(2);
  },
);
