import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { httpRequest } from '../src/client/http-request.js';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';

const LLM_SERVER = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps', 'llm-server.mjs');
const SEQUENTIAL = 1000;
const ROUNDS = 4;
const CLIENTS = 64;
const THROUGHPUT_SECONDS = 5;

export async function startLlmServer(): Promise<{ baseURL: string; stop: () => void }> {
  const child = spawn(process.execPath, [LLM_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const baseURL = await new Promise<string>((resolve, reject) => {
    child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the bench's LLM server exited with ${code} before it listened`)));
  });
  return { baseURL, stop: () => child.kill('SIGTERM') };
}

const body = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hello there' }] });
// Clients use node:http with keep-alive: fetch would spend more of the 2 cores than the gateway.
async function call(baseURL: string): Promise<void> {
  const answer = await httpRequest(
    `${baseURL}/chat/completions`,
    'POST',
    { 'content-type': 'application/json' },
    body,
    30_000,
  );
  if (answer.status !== 200) throw new Error(`call failed: ${answer.status}`);
}

async function timeCalls(baseURL: string, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    await call(baseURL);
    times.push(performance.now() - start);
  }
  return times;
}

/** Calls per second that CLIENTS concurrent clients get from `baseURL` in `seconds`. */
async function throughput(baseURL: string, seconds: number): Promise<number> {
  let calls = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < until) {
        await call(baseURL);
        calls++;
      }
    }),
  );
  return calls / ((performance.now() - started) / 1000);
}

const stats = (times: number[]) => {
  const sorted = [...times].sort((a, b) => a - b);
  return { median: percentile(sorted, 50), p99: percentile(sorted, 99) };
};

/**
 * The gateway against calling the upstream directly, in one run: sequential calls alternating
 * between the two, then CLIENTS concurrent clients through the gateway. The upstream (the
 * OpenAI-compatible test server) and `agl serve` are processes of their own.
 */
export const gateway: Benchmark = {
  name: 'gateway',
  description: `LLM gateway overhead (${ROUNDS} x ${SEQUENTIAL} calls each way) and throughput (${CLIENTS} clients, ${THROUGHPUT_SECONDS} s)`,
  async run(size: Size): Promise<Figure[]> {
    const [warmUp, sequential, rounds, seconds] = sized(
      size,
      [200, SEQUENTIAL, ROUNDS, THROUGHPUT_SECONDS],
      [20, 20, 1, 0.5],
    );
    const dir = await newTempDir();
    const llm = await startLlmServer();
    const serve = await spawnServe(['--quiet', '--db', join(dir, 'gateway-bench.duckdb'), '--upstream', llm.baseURL]);
    const through = `${serve.url}/v1/gateway/v1`;
    try {
      await timeCalls(llm.baseURL, warmUp);
      await timeCalls(through, warmUp);
      const direct: number[] = [];
      const gatewayed: number[] = [];
      for (let round = 0; round < rounds; round++) {
        direct.push(...(await timeCalls(llm.baseURL, sequential)));
        gatewayed.push(...(await timeCalls(through, sequential)));
      }
      const directRate = await throughput(llm.baseURL, seconds);
      const rate = await throughput(through, seconds);
      const base = stats(direct);
      const viaGateway = stats(gatewayed);
      return [
        {
          name: 'gateway overhead per call: median',
          value: Number((viaGateway.median - base.median).toFixed(3)),
          unit: 'ms',
          target: '< 1',
        },
        {
          name: 'gateway overhead per call: p99',
          value: Number((viaGateway.p99 - base.p99).toFixed(3)),
          unit: 'ms',
          target: '',
        },
        { name: `gateway throughput, ${CLIENTS} clients`, value: Math.round(rate), unit: 'calls/s', target: '>= 2000' },
        {
          name: `upstream throughput without the gateway, ${CLIENTS} clients`,
          value: Math.round(directRate),
          unit: 'calls/s',
          target: '',
        },
        {
          name: 'gateway / direct throughput',
          value: Number((rate / directRate).toFixed(2)),
          unit: 'ratio',
          target: '',
        },
      ];
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
      llm.stop();
      await removeDir(dir);
    }
  },
};
