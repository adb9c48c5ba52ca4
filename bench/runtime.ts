import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Baseline } from '../src/algorithms/baseline.js';
import { Trainer } from '../src/runtime/trainer.js';
import { newTempDir, removeDir } from '../test/support/helpers.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';
import { startLlmServer } from './gateway.js';
import { runRollouts } from './store.js';

const ROLLOUTS = Number(process.env.AGL_BENCH_RUNTIME_ROLLOUTS ?? 2000);
const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps', 'trivial-agent.mjs');

/** Rollouts/s of the Baseline over `rollouts` tasks of the trivial agent, with the Trainer's `options`. */
async function rolloutsPerSecond(
  llmBaseURL: string,
  rollouts: number,
  options: { strategy: 'in-process' | 'processes'; nRunners: number; runnerConcurrency?: number },
): Promise<{ rate: number; succeeded: number }> {
  const dir = await newTempDir();
  try {
    const llm = {
      resource_type: 'llm' as const,
      endpoint: llmBaseURL,
      model: 'bench-model',
      api_key: null,
      sampling_parameters: {},
    };
    const trainer = new Trainer({
      algorithm: new Baseline({ resources: { llm } }),
      db: join(dir, 'runtime.duckdb'),
      progress: false,
      ...options,
    });
    const tasks = Array.from({ length: rollouts }, (_, i) => ({ i }));
    const started = performance.now();
    const result = await trainer.fit(AGENT, { train: tasks });
    return { rate: result.total / ((performance.now() - started) / 1000), succeeded: result.succeeded };
  } finally {
    await removeDir(dir);
  }
}

/** The Trainer end to end: rollouts of a trivial agent per second, in-process and with 2 runner processes, against the store alone. */
export const runtime: Benchmark = {
  name: 'runtime',
  description: `Trainer + Baseline: ${ROLLOUTS} rollouts of a one-call agent (the test LLM server in its own process)`,
  async run(size: Size): Promise<Figure[]> {
    const rollouts = sized(size, ROLLOUTS, 32);
    const llm = await startLlmServer();
    try {
      const storeOnly = (await runRollouts(32, rollouts)).rolloutsPerSec;
      const inProcess = await rolloutsPerSecond(llm.baseURL, rollouts, { strategy: 'in-process', nRunners: 16 });
      const processes = await rolloutsPerSecond(llm.baseURL, rollouts, {
        strategy: 'processes',
        nRunners: 2,
        runnerConcurrency: 8,
      });
      return [
        {
          name: 'runtime.in_process.rollouts_per_s',
          value: Math.round(inProcess.rate),
          unit: 'rollouts/s',
          target: '',
        },
        {
          name: 'runtime.in_process.succeeded',
          value: inProcess.succeeded,
          unit: 'rollouts',
          target: `>= ${rollouts}`,
        },
        {
          name: 'runtime.processes_2.rollouts_per_s',
          value: Math.round(processes.rate),
          unit: 'rollouts/s',
          target: '',
        },
        {
          name: 'runtime.processes_2.succeeded',
          value: processes.succeeded,
          unit: 'rollouts',
          target: `>= ${rollouts}`,
        },
        { name: 'runtime.store_only.rollouts_per_s', value: Math.round(storeOnly), unit: 'rollouts/s', target: '' },
        {
          name: 'runtime.in_process / store_only',
          value: Number((inProcess.rate / storeOnly).toFixed(3)),
          unit: 'ratio',
          target: '',
        },
        {
          name: 'runtime.processes_2 / store_only',
          value: Number((processes.rate / storeOnly).toFixed(3)),
          unit: 'ratio',
          target: '',
        },
      ];
    } finally {
      llm.stop();
    }
  },
};
