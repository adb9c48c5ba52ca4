import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { availableParallelism } from 'node:os';
import { DecodePool } from '../src/collector/decode-pool.js';
import { httpRequest } from '../src/client/http-request.js';
import { DuckDBStore } from '../src/store/store.js';
import { status as grpcStatus } from '@grpc/grpc-js';
import { freePort, newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { freshCopy, makeBatch, type BatchTemplate } from '../test/support/otlp-batches.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';
import { Http2GrpcSender } from './grpc-sender.js';

export const BATCH = 512;
export const SENDERS = 8;

export interface Shape {
  readonly key: 'small' | 'llm';
  readonly label: string;
  readonly totalSpans: number;
  readonly promptBytes?: number;
  readonly target: number;
}

export const SHAPES: Shape[] = [
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

/** Sends one request body; false when the server asked for a retry (a full write queue). */
export type Send = (body: Buffer) => Promise<boolean>;

/** A sender of OTLP/HTTP posts over undici's pool, as `StoreClient` uses. */
export function httpSender(url: string): Send {
  return async (body) => {
    const { status } = await httpRequest(
      `${url}/v1/traces`,
      'POST',
      { 'content-type': 'application/x-protobuf' },
      body,
      60_000,
    );
    if (status !== 200 && status !== 503 && status !== 429) throw new Error(`ingest failed: ${status}`);
    return status === 200;
  };
}

const TRACE_EXPORT = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';

/** A sender of OTLP/gRPC Export calls on a connection of its own, as a separate app's exporter has. */
function grpcSender(address: string): { send: Send; close(): void } {
  const sender = new Http2GrpcSender(address);
  return {
    send: async (body) => {
      const { status, message } = await sender.send(TRACE_EXPORT, body);
      if (status !== 0 && status !== grpcStatus.UNAVAILABLE) throw new Error(`ingest failed: ${status} ${message}`);
      return status === 0;
    },
    close: () => sender.close(),
  };
}

/** What sending a run of batches measured. */
export interface Sent {
  seconds: number;
  readonly latencies: number[];
  retries: number;
}

export const newSent = (): Sent => ({ seconds: 0, latencies: [], retries: 0 });

/** Request bodies by serial number: fresh copies of templates, no two serials alike. */
export type Bodies = (serial: number) => Buffer;

/** Fresh copies of `templates` (new trace ids), taking the templates in turn. */
export const copiesOf =
  (...templates: BatchTemplate[]): Bodies =>
  (serial) =>
    freshCopy(templates[serial % templates.length], serial);

/** Sends `count` bodies (serials from `serial`) through `sends`, one in flight per sender. */
async function sendBatches(
  sends: readonly Send[],
  bodies: Bodies,
  serial: number,
  count: number,
  into: Sent,
): Promise<void> {
  let next = 0;
  const start = performance.now();
  await Promise.all(
    sends.map(async (send) => {
      while (next < count) {
        const body = bodies(serial + next++);
        for (;;) {
          const sent = performance.now();
          const accepted = await send(body);
          into.latencies.push(performance.now() - sent);
          if (accepted) break;
          into.retries++;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    }),
  );
  into.seconds += (performance.now() - start) / 1000;
}

export function summary(sent: Sent, spans: number) {
  const latencies = [...sent.latencies].sort((a, b) => a - b);
  return {
    spansPerSec: spans / sent.seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    retries: sent.retries,
  };
}

/** `agl serve` in its own process, SENDERS concurrent clients posting BATCH-span requests. */
async function overHttp(template: BatchTemplate, totalSpans: number, serialBase: number) {
  const dir = await newTempDir();
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'bench.duckdb')]);
  try {
    const batches = Math.ceil(totalSpans / template.spanCount);
    const sends = Array.from({ length: SENDERS }, () => httpSender(serve.url));
    // Warm-up: one request per sender, all at once, to a server whose code is not compiled yet
    // (V8 compiles the decoder and the writer's paths as they run hot). Its slowest answer is a
    // figure of its own; the measured run starts warm, as a server's steady state does.
    const bodies = copiesOf(template);
    const warmUp = newSent();
    await sendBatches(sends, bodies, serialBase - SENDERS, SENDERS, warmUp);
    const sent = newSent();
    await sendBatches(sends, bodies, serialBase, batches, sent);
    const pid = serve.child.pid;
    if (pid === undefined) throw new Error('agl serve has no pid');
    const rss = await rssMb(pid);
    return { ...summary(sent, batches * template.spanCount), coldMax: Math.max(...warmUp.latencies), rss };
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
    await removeDir(dir);
  }
}

/** Batches each transport sends before the other takes its turn. */
const ROUND = 4 * SENDERS;

/** Senders of one way to a server, the bodies they send, and what sending them measured. */
export interface Transport {
  readonly sends: readonly Send[];
  readonly bodies: Bodies;
  readonly sent: Sent;
}

/**
 * Transports taking turns ROUND batches at a time, `batches` through each, after a warm-up
 * request per sender (not measured), so that all meet the same load on the machine (and, those
 * to one server, the same server state: file size, checkpoints). Serials from `serial` on.
 */
export async function takeTurns(transports: readonly Transport[], serial: number, batches: number): Promise<void> {
  for (const { sends, bodies } of transports) {
    await sendBatches(sends, bodies, serial, sends.length, newSent());
    serial += sends.length;
  }
  for (let done = 0; done < batches; done += ROUND) {
    for (const { sends, bodies, sent } of transports) {
      const count = Math.min(ROUND, batches - done);
      await sendBatches(sends, bodies, serial, count, sent);
      serial += count;
    }
  }
}

/**
 * OTLP/HTTP against OTLP/gRPC: SENDERS senders of each to one `agl serve`, taking turns
 * (`takeTurns`), `spansEach` spans through each.
 */
async function httpVersusGrpc(template: BatchTemplate, spansEach: number, serialBase: number) {
  const dir = await newTempDir();
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'ab.duckdb'), '--grpc-port', String(await freePort())]);
  const grpcSenders = Array.from({ length: SENDERS }, () => grpcSender(serve.grpcAddress as string));
  const bodies = copiesOf(template);
  const transports = [
    { sends: Array.from({ length: SENDERS }, () => httpSender(serve.url)), bodies, sent: newSent() },
    { sends: grpcSenders.map((s) => s.send), bodies, sent: newSent() },
  ];
  try {
    const batches = Math.ceil(spansEach / template.spanCount);
    await takeTurns(transports, serialBase, batches);
    const [http, grpc] = transports.map(({ sent }) => summary(sent, batches * template.spanCount));
    return { http, grpc };
  } finally {
    for (const sender of grpcSenders) sender.close();
    serve.child.kill('SIGTERM');
    await serve.exited;
    await removeDir(dir);
  }
}

export const ingest: Benchmark = {
  name: 'ingest',
  description: `OTLP/HTTP ingest into agl serve, and OTLP/gRPC against it: ${BATCH}-span protobuf batches, ${SENDERS} concurrent senders`,
  async run(size: Size): Promise<Figure[]> {
    const figures: Figure[] = [];
    // The smoke run: small spans only (the other shape takes the same paths with larger values).
    for (const shape of sized(size, SHAPES, SHAPES.slice(0, 1))) {
      const template = await makeBatch(BATCH, { rolloutId: undefined, promptBytes: shape.promptBytes });
      const totalSpans = sized(size, shape.totalSpans, 2 * BATCH);
      const ceiling = await inProcessCeiling(template, Math.min(totalSpans, 300_000), 1);
      const http = await overHttp(template, totalSpans, 1_000_000);
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
      const ab = await httpVersusGrpc(template, totalSpans / 2, 3_000_000);
      figures.push(
        {
          name: `${prefix}.grpc_spans_per_s`,
          value: Math.round(ab.grpc.spansPerSec),
          unit: 'spans/s',
          target: `>= ${shape.target}`,
        },
        {
          name: `${prefix}.grpc_vs_http`,
          value: round(ab.grpc.spansPerSec / ab.http.spansPerSec, 2),
          unit: 'ratio',
          target: '>= 1',
        },
        { name: `${prefix}.grpc_p99_latency`, value: round(ab.grpc.p99, 1), unit: 'ms', target: '< 500' },
        {
          name: `${prefix}.grpc_p99_vs_http`,
          value: round(ab.grpc.p99 / ab.http.p99, 2),
          unit: 'ratio',
          target: '<= 1',
        },
        { name: `${prefix}.grpc_retried_requests`, value: ab.grpc.retries, unit: 'requests', target: '' },
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

export const round = (value: number, digits: number) => Number(value.toFixed(digits));
