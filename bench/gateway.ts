import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { httpRequest } from '../src/client/http-request.js';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';
import { cpuOf } from './process-cpu.js';

const LLM_SERVER = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps', 'llm-server.mjs');
const SEQUENTIAL = 1000;
const ROUNDS = 4;
const CLIENTS = 64;
const THROUGHPUT_SECONDS = 5;

export async function startLlmServer(): Promise<{ baseURL: string; pid: number; stop: () => void }> {
  const child = spawn(process.execPath, [LLM_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const baseURL = await new Promise<string>((resolve, reject) => {
    child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the bench's LLM server exited with ${code} before it listened`)));
  });
  return { baseURL, pid: child.pid as number, stop: () => child.kill('SIGTERM') };
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

interface Throughput {
  readonly callsPerSecond: number;
  /** CPU milliseconds per call of each process that `pids` names, and of the clients (this process). */
  readonly cpuMsPerCall: Record<string, number>;
}

/**
 * Calls per second that CLIENTS concurrent clients get from `baseURL` in `seconds`, with the CPU
 * each process spent per call meanwhile: on a machine whose cores the processes share, the rate
 * is bound by their sum.
 */
async function throughput(baseURL: string, seconds: number, pids: Record<string, number>): Promise<Throughput> {
  let calls = 0;
  const cpuBefore = Object.entries(pids).map(([name, pid]) => [name, cpuOf(pid).own] as const);
  const clientsBefore = process.cpuUsage();
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
  const elapsed = (performance.now() - started) / 1000;
  const clients = process.cpuUsage(clientsBefore);
  const cpuMsPerCall: Record<string, number> = { clients: (clients.user + clients.system) / 1000 / calls };
  for (const [name, before] of cpuBefore) cpuMsPerCall[name] = ((cpuOf(pids[name]).own - before) * 1000) / calls;
  return { callsPerSecond: calls / elapsed, cpuMsPerCall };
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
      const direct64 = await throughput(llm.baseURL, seconds, { upstream: llm.pid });
      const through64 = await throughput(through, seconds, { upstream: llm.pid, gateway: serve.child.pid as number });
      const base = stats(direct);
      const viaGateway = stats(gatewayed);
      const cpu = through64.cpuMsPerCall;
      const direct64Cpu = direct64.cpuMsPerCall;
      console.log(
        `  CPU ms per call, direct: clients ${direct64Cpu.clients.toFixed(3)}, upstream ${direct64Cpu.upstream.toFixed(3)}; through the gateway: clients ${cpu.clients.toFixed(3)}, upstream ${cpu.upstream.toFixed(3)}, gateway ${cpu.gateway.toFixed(3)}`,
      );
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
        {
          name: `gateway throughput, ${CLIENTS} clients`,
          value: Math.round(through64.callsPerSecond),
          unit: 'calls/s',
          target: '>= 2000',
        },
        {
          name: `upstream throughput without the gateway, ${CLIENTS} clients`,
          value: Math.round(direct64.callsPerSecond),
          unit: 'calls/s',
          target: '',
        },
        {
          name: 'gateway / direct throughput',
          value: Number((through64.callsPerSecond / direct64.callsPerSecond).toFixed(2)),
          unit: 'ratio',
          target: '>= 0.6',
        },
        // The gateway's own CPU per call (its process: span recording and storing included).
        { name: 'gateway CPU per call', value: Number(cpu.gateway.toFixed(3)), unit: 'ms', target: '' },
        // What the rate ratio would be if the cores were the only bound: the direct run's CPU per
        // call (clients and upstream) over the gateway run's (the gateway's too).
        {
          name: 'direct / gateway CPU per call',
          value: Number(
            ((direct64Cpu.clients + direct64Cpu.upstream) / (cpu.clients + cpu.upstream + cpu.gateway)).toFixed(2),
          ),
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
