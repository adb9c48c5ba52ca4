import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { DecodePool } from '../src/collector/decode-pool.js';
import { httpRequest } from '../src/client/http-request.js';
import { DuckDBStore } from '../src/store/store.js';
import { newTempDir, removeDir, spawnServe } from '../test/helpers.js';
import { freshCopy, makeBatch, type BatchTemplate } from '../test/otlp-batches.js';
import { percentile, type Benchmark, type Figure } from './figures.js';

const BATCH = 512;
const SENDERS = 8;

interface Shape {
  readonly key: 'small' | 'llm';
  readonly label: string;
  readonly totalSpans: number;
  readonly promptBytes?: number;
  readonly target: number;
}

const SHAPES: Shape[] = [
  { key: 'small', label: 'small spans (10 attributes)', totalSpans: 1_000_000, target: 60_000 },
  { key: 'llm', label: 'LLM-sized spans (4 KB prompt)', totalSpans: 100_000, promptBytes: 4096, target: 12_000 },
];

/**
 * What the server could at most do: the same decode threads and store, SENDERS batches in
 * flight, without HTTP.
 */
async function inProcessCeiling(template: BatchTemplate, totalSpans: number, serialBase: number): Promise<number> {
  const dir = await newTempDir();
  const store = await DuckDBStore.open({ path: join(dir, 'ceiling.duckdb') });
  const decoder = new DecodePool(Math.max(1, availableParallelism() - 1));
  try {
    const batches = Math.ceil(totalSpans / template.spanCount);
    const start = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < batches) {
        const body = freshCopy(template, serialBase + next++);
        const bytes = body.length;
        await store.writeSpans((await decoder.decode('traces', 'protobuf', body)).rows, bytes);
      }
    };
    await Promise.all(Array.from({ length: SENDERS }, worker));
    return (batches * template.spanCount) / ((performance.now() - start) / 1000);
  } finally {
    await decoder.close();
    await store.close();
    await removeDir(dir);
  }
}

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = /VmRSS:\s+(\d+)/.exec(status)?.[1];
  if (kb === undefined) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(kb) / 1024;
}

/** `agl serve` in its own process, SENDERS concurrent clients posting BATCH-span requests. */
async function overHttp(template: BatchTemplate, totalSpans: number, serialBase: number) {
  const dir = await newTempDir();
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'bench.duckdb')]);
  try {
    const batches = Math.ceil(totalSpans / template.spanCount);
    let latencies: number[] = [];
    let retries = 0;
    const send = async (serial: number) => {
      const body = freshCopy(template, serial);
      for (;;) {
        const sent = performance.now();
        const { status } = await httpRequest(
          `${serve.url}/v1/traces`,
          'POST',
          { 'content-type': 'application/x-protobuf' },
          body,
          60_000,
        );
        latencies.push(performance.now() - sent);
        if (status === 200) return;
        if (status !== 503 && status !== 429) throw new Error(`ingest failed: ${status}`);
        retries++;
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    // Warm-up: one request per sender, all at once, to a server whose code is not compiled yet
    // (V8 compiles the decoder and the writer's paths as they run hot). Its slowest answer is a
    // figure of its own; the measured run starts warm, as a server's steady state does.
    await Promise.all(Array.from({ length: SENDERS }, (_, i) => send(serialBase - 1 - i)));
    const coldMax = Math.max(...latencies);
    latencies = [];
    let next = 0;
    const sender = async () => {
      while (next < batches) await send(serialBase + next++);
    };
    const start = performance.now();
    await Promise.all(Array.from({ length: SENDERS }, sender));
    const seconds = (performance.now() - start) / 1000;
    const pid = serve.child.pid;
    if (pid === undefined) throw new Error('agl serve has no pid');
    const rss = await rssMb(pid);
    latencies.sort((a, b) => a - b);
    return {
      spansPerSec: (batches * template.spanCount) / seconds,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      coldMax,
      rss,
      retries,
    };
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
    await removeDir(dir);
  }
}

export const ingest: Benchmark = {
  name: 'ingest',
  description: `OTLP/HTTP ingest into agl serve: ${BATCH}-span protobuf batches, ${SENDERS} concurrent senders`,
  async run(): Promise<Figure[]> {
    const figures: Figure[] = [];
    for (const shape of SHAPES) {
      const template = await makeBatch(BATCH, { rolloutId: undefined, promptBytes: shape.promptBytes });
      const ceiling = await inProcessCeiling(template, Math.min(shape.totalSpans, 300_000), 1);
      const http = await overHttp(template, shape.totalSpans, 1_000_000);
      const prefix = `ingest.${shape.key}`;
      figures.push(
        {
          name: `${prefix}.http_spans_per_s`,
          value: Math.round(http.spansPerSec),
          unit: 'spans/s',
          target: `>= ${shape.target}`,
        },
        { name: `${prefix}.in_process_spans_per_s`, value: Math.round(ceiling), unit: 'spans/s', target: '' },
        {
          name: `${prefix}.http_vs_in_process`,
          value: round(http.spansPerSec / ceiling, 2),
          unit: 'ratio',
          target: '>= 0.6',
        },
        { name: `${prefix}.p50_latency`, value: round(http.p50, 1), unit: 'ms', target: '' },
        { name: `${prefix}.p99_latency`, value: round(http.p99, 1), unit: 'ms', target: '< 500' },
        { name: `${prefix}.cold_burst_max_latency`, value: round(http.coldMax, 1), unit: 'ms', target: '' },
        { name: `${prefix}.retried_requests`, value: http.retries, unit: 'requests', target: '' },
      );
      if (shape.key === 'small') {
        figures.push({
          name: `${prefix}.server_rss_after_${shape.totalSpans / 1e6}M`,
          value: Math.round(http.rss),
          unit: 'MB',
          target: '< 400',
        });
      }
    }
    return figures;
  },
};

const round = (value: number, digits: number) => Number(value.toFixed(digits));
