import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { REGISTER } from '../test/support/instrumented-app.js';
import { startOpenAITestServer } from '../test/support/openai-server.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';

const APPS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps');
const APP = join(APPS, 'llm-calls.mjs');
const CALLS = 1000;
// Each process's own median varies by about 0.15 ms (two runs of the same plain app, one after the
// other: -0.32 to +0.25 ms apart), so the difference of pooled medians needs many processes: with
// 16 rounds its standard error is about 0.05 ms (8 rounds: 0.075).
const ROUNDS = 16;

interface AppTimes {
  readonly times: number[];
  readonly heapGrowthMb: number;
}

function runApp(env: Record<string, string>, register: boolean, calls: number): Promise<AppTimes> {
  const args = ['--expose-gc', ...(register ? ['--import', REGISTER] : []), APP];
  const child = spawn(process.execPath, args, {
    env: { ...process.env, ...env, CALLS: String(calls) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return new Promise((resolve, reject) =>
    child.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(out) as AppTimes) : reject(new Error(`bench app exited with ${code}`)),
    ),
  );
}

/** Library instrumentations off: agl's own recorders only. */
const OWN_ONLY = { OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'fetch,http,langchain' };
const START_UPS = 8;

/** Milliseconds from spawn to exit of a process that does nothing, under agl/register or not. */
function startUp(env: Record<string, string>, register: boolean): Promise<number> {
  const started = performance.now();
  const child = spawn(process.execPath, [...(register ? ['--import', REGISTER] : []), '-e', '0'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return new Promise((resolve, reject) =>
    child.on('close', (code) =>
      code === 0 ? resolve(performance.now() - started) : reject(new Error(`node exited with ${code}`)),
    ),
  );
}

/** Median start-ups: plain node, agl/register with its own recorders only, and with the library instrumentations. */
async function startUps(env: Record<string, string>): Promise<{ plain: number; own: number; libraries: number }> {
  const plain: number[] = [];
  const own: number[] = [];
  const libraries: number[] = [];
  for (let round = 0; round < START_UPS; round++) {
    plain.push(await startUp(env, false));
    own.push(await startUp({ ...env, ...OWN_ONLY }, true));
    libraries.push(await startUp(env, true));
  }
  const median = (times: number[]) =>
    percentile(
      [...times].sort((a, b) => a - b),
      50,
    );
  return { plain: median(plain), own: median(own), libraries: median(libraries) };
}

/** agl's fetch against the original in one process, alternating blocks of calls (same-process-ab.mjs). */
function runSameProcess(env: Record<string, string>): Promise<{ plain: number; agl: number; added: number }> {
  const args = ['--import', join(APPS, 'keep-fetch.mjs'), '--import', REGISTER, join(APPS, 'same-process-ab.mjs')];
  const child = spawn(process.execPath, args, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  return new Promise((resolve, reject) =>
    child.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`bench app exited with ${code}`)),
    ),
  );
}

const stats = (times: number[]) => {
  const sorted = [...times].sort((a, b) => a - b);
  return { median: percentile(sorted, 50), p99: percentile(sorted, 99) };
};
const round = (value: number, digits = 3) => Number(value.toFixed(digits));

function standardError(values: number[]): number {
  const mean = values.reduce((sum, value) => sum + value, 0) / values.length;
  const variance = values.reduce((sum, value) => sum + (value - mean) ** 2, 0) / (values.length - 1);
  return Math.sqrt(variance / values.length);
}

/**
 * The same app, calling the local OpenAI-compatible test server, without and with
 * `--import agl/register` (spans sent to a running `agl serve`), in one run; then with the
 * collector unreachable, for memory.
 */
export const instrumentation: Benchmark = {
  name: 'instrumentation',
  description: `added latency per LLM call under agl/register (${ROUNDS} x ${CALLS} calls each way), and start-up`,
  async run(size: Size): Promise<Figure[]> {
    const [rounds, calls, downCalls] = sized(size, [ROUNDS, CALLS, 10_000], [1, 50, 200]);
    const dir = await newTempDir();
    const llm = await startOpenAITestServer();
    const serve = await spawnServe(['--quiet', '--db', join(dir, 'instrumentation-bench.duckdb')]);
    try {
      const env: Record<string, string> = {
        OPENAI_BASE_URL: llm.baseURL,
        AGL_ENDPOINT: serve.url,
        ...sized<Record<string, string>>(size, {}, { WARMUP: '20', BLOCKS: '1' }),
      };
      // Alternate the two runs so that drift on the machine hits both alike.
      const plain: number[] = [];
      const recorded: number[] = [];
      const ownOnly: number[] = [];
      const roundDifferences: number[] = [];
      for (let round = 0; round < rounds; round++) {
        const { times: plainTimes } = await runApp(env, false, calls);
        const { times: recordedTimes } = await runApp(env, true, calls);
        const { times: ownTimes } = await runApp({ ...env, ...OWN_ONLY }, true, calls);
        plain.push(...plainTimes);
        recorded.push(...recordedTimes);
        ownOnly.push(...ownTimes);
        roundDifferences.push(stats(recordedTimes).median - stats(plainTimes).median);
      }
      const sameProcess = await runSameProcess(env);
      const downPlain = await runApp(env, false, downCalls);
      const down = await runApp({ ...env, AGL_ENDPOINT: 'http://127.0.0.1:9' }, true, downCalls);
      const starts = await startUps(env);
      const base = stats(plain);
      const withAgl = stats(recorded);
      const withOwn = stats(ownOnly);
      return [
        { name: 'llm call, plain: median', value: round(base.median), unit: 'ms', target: '' },
        { name: 'llm call, plain: p99', value: round(base.p99), unit: 'ms', target: '' },
        { name: 'added per llm call: median', value: round(withAgl.median - base.median), unit: 'ms', target: '< 0.3' },
        // How far the median's difference can be trusted: the standard error of the rounds' own differences.
        {
          name: 'added per llm call: median, standard error',
          value: round(standardError(roundDifferences)),
          unit: 'ms',
          target: '',
        },
        { name: 'added per llm call: p99', value: round(withAgl.p99 - base.p99), unit: 'ms', target: '< 2' },
        // The same difference with the machine's drift taken out (one process, alternating blocks).
        { name: 'added per llm call, same process: median', value: round(sameProcess.added), unit: 'ms', target: '' },
        // What the library instrumentations (auto-instrumentations-node) add to an LLM call: none
        // of them is on its path, so this is the noise of the difference.
        {
          name: 'added per llm call by the library instrumentations: median',
          value: round(withAgl.median - withOwn.median),
          unit: 'ms',
          target: '',
        },
        { name: 'start-up, plain node', value: round(starts.plain, 0), unit: 'ms', target: '' },
        {
          name: 'start-up added by agl/register, own recorders',
          value: round(starts.own - starts.plain, 0),
          unit: 'ms',
          target: '',
        },
        {
          name: 'start-up added by the library instrumentations',
          value: round(starts.libraries - starts.own, 0),
          unit: 'ms',
          target: '',
        },
        {
          name: 'live heap added over 10k calls, collector down',
          value: round(down.heapGrowthMb - downPlain.heapGrowthMb, 1),
          unit: 'MB',
          target: '< 32',
        },
      ];
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
      await llm.close();
      await removeDir(dir);
    }
  },
};
