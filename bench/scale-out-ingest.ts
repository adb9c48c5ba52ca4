import { join } from 'node:path';
import type { AttemptedRollout } from '../src/api/types.js';
import { StoreClient } from '../src/client/store-client.js';
import { makeBatch } from '../test/support/otlp-batches.js';
import { newTempDir, removeDir, spawnServe, type SpawnedServe } from '../test/support/helpers.js';
import type { PostgresCluster } from '../test/support/postgres.js';
import { startProxy } from '../test/support/proxy.js';
import { sized, type Figure, type Size } from './figures.js';
import {
  BATCH,
  copiesOf,
  httpSender,
  newSent,
  round,
  SENDERS,
  SHAPES,
  summary,
  takeTurns,
  type Bodies,
  type Shape,
  type Transport,
} from './ingest.js';

// OTLP/HTTP ingest of the ingest benchmark's batches (512 spans, 8 senders) into (a) one
// `agl serve` with its state in its DuckDB file, direct; (b) the same server through nginx, the
// two taking turns; (c) two servers on one PostgreSQL behind nginx. Spans of running attempts,
// as a fleet's runners send them, get their sequence ids from PostgreSQL and are heartbeats
// there; spans of no rollout do not touch it, which shows what the two servers and nginx cost
// without it.

/** Attempts the spans belong to; the requests take them in turn (each request of one rollout). */
const ROLLOUTS = 8;

interface Workload {
  readonly key: string;
  readonly shape: Shape;
  /** Spans through each setup (warm-up requests aside). */
  readonly spans: number;
  /** Whether the spans are of running attempts, or of no rollout. */
  readonly attributed: boolean;
}

const shape = (key: Shape['key']) => SHAPES.find((s) => s.key === key) as Shape;

const WORKLOADS: Workload[] = [
  { key: 'small', shape: shape('small'), spans: 200_000, attributed: true },
  { key: 'small_no_rollout', shape: shape('small'), spans: 200_000, attributed: false },
  { key: 'llm', shape: shape('llm'), spans: 40_000, attributed: true },
];

/** Running attempts of ROLLOUTS new rollouts of the store at `url`. */
async function runningAttempts(url: string): Promise<AttemptedRollout[]> {
  const client = new StoreClient(url);
  await client.enqueueManyRollouts(Array.from({ length: ROLLOUTS }, (_, task) => ({ input: { task } })));
  const taken: AttemptedRollout[] = [];
  while (taken.length < ROLLOUTS)
    taken.push(...(await client.dequeueManyRollouts({ limit: ROLLOUTS - taken.length, waitSeconds: 5 })));
  return taken;
}

/** Request bodies of the workload's spans: each of one running attempt of the store at `url`, or of none. */
async function bodiesOf(workload: Workload, url: string): Promise<Bodies> {
  const { promptBytes } = workload.shape;
  if (!workload.attributed) return copiesOf(await makeBatch(BATCH, { promptBytes }));
  const templates = [];
  for (const { rollout_id, attempt } of await runningAttempts(url))
    templates.push(await makeBatch(BATCH, { rolloutId: rollout_id, attemptId: attempt.attempt_id, promptBytes }));
  return copiesOf(...templates);
}

/** SENDERS senders of `bodies` to `url`. */
const sendersTo = (url: string, bodies: Bodies): Transport => ({
  sends: Array.from({ length: SENDERS }, () => httpSender(url)),
  bodies,
  sent: newSent(),
});

/** `agl serve` processes (on PostgreSQL at `state`, if given) behind nginx. */
interface Setup {
  readonly servers: SpawnedServe[];
  readonly proxyUrl: string;
  /** Spans the servers' files hold together (each server counts its own). */
  stored(): Promise<number>;
  stop(): Promise<void>;
}

async function startSetup(count: number, state: string | null): Promise<Setup> {
  const dir = await newTempDir();
  const servers: SpawnedServe[] = [];
  const stop = async () => {
    for (const server of servers) server.child.kill('SIGTERM');
    await Promise.all(servers.map((s) => s.exited));
    await removeDir(dir);
  };
  try {
    for (let i = 0; i < count; i++)
      servers.push(
        await spawnServe(['--quiet', '--db', join(dir, `ingest-${i}.duckdb`), ...(state ? ['--state', state] : [])]),
      );
    const proxy = await startProxy(servers.map((s) => s.url));
    return {
      servers,
      proxyUrl: proxy.url,
      async stored() {
        let total = 0;
        for (const server of servers) total += (await new StoreClient(server.url).statistics()).total_spans;
        return total;
      },
      async stop() {
        await proxy.stop();
        await stop();
      },
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Figures of one transport: spans/s, latencies, retries, and spans/s against `baseline`'s. */
function transportFigures(name: string, transport: Transport, spans: number, baseline: number | null): Figure[] {
  const s = summary(transport.sent, spans);
  return [
    { name: `${name}.spans_per_s`, value: Math.round(s.spansPerSec), unit: 'spans/s', target: '' },
    ...(baseline === null
      ? []
      : [{ name: `${name}.vs_direct`, value: round(s.spansPerSec / baseline, 2), unit: 'ratio', target: '' }]),
    { name: `${name}.p50_latency`, value: round(s.p50, 1), unit: 'ms', target: '' },
    { name: `${name}.p99_latency`, value: round(s.p99, 1), unit: 'ms', target: '' },
    { name: `${name}.retried_requests`, value: s.retries, unit: 'requests', target: '' },
  ];
}

/**
 * `count` servers behind nginx, the transports `transportsTo` makes for them taking turns
 * (`takeTurns`), `batches` through each. Answers them, and how many of the spans sent (warm-up
 * included) the servers do not hold, or hold twice: 0 when each was stored once.
 */
async function ingestInto(
  count: number,
  state: string | null,
  batches: number,
  transportsTo: (setup: Setup) => Promise<Transport[]>,
): Promise<{ transports: Transport[]; lostOrRepeated: number }> {
  const setup = await startSetup(count, state);
  try {
    const transports = await transportsTo(setup);
    await takeTurns(transports, 0, batches);
    const sent = transports.length * (batches + SENDERS) * BATCH;
    return { transports, lostOrRepeated: Math.abs(sent - (await setup.stored())) };
  } finally {
    await setup.stop();
  }
}

/**
 * One workload through (a) and (b) taking turns, then through (c) on a fresh database of
 * `cluster`. (Not all three in turns: a server left idle checkpoints, which the next turn to it
 * would wait for.)
 */
async function measure(workload: Workload, cluster: PostgresCluster, size: Size): Promise<Figure[]> {
  const batches = sized(size, Math.ceil(workload.spans / BATCH), 1);
  const one = await ingestInto(1, null, batches, async ({ servers, proxyUrl }) => {
    const bodies = await bodiesOf(workload, proxyUrl);
    return [sendersTo(servers[0].url, bodies), sendersTo(proxyUrl, bodies)];
  });
  const two = await ingestInto(2, await cluster.createDatabase(), batches, async ({ proxyUrl }) => [
    sendersTo(proxyUrl, await bodiesOf(workload, proxyUrl)),
  ]);
  const spans = batches * BATCH;
  const [direct, proxied] = one.transports;
  const baseline = summary(direct.sent, spans).spansPerSec;
  const prefix = `scale_out.ingest.${workload.key}`;
  return [
    ...transportFigures(`${prefix}.duckdb_1_direct`, direct, spans, null),
    ...transportFigures(`${prefix}.duckdb_1_nginx`, proxied, spans, baseline),
    ...transportFigures(`${prefix}.postgres_2_nginx`, two.transports[0], spans, baseline),
    { name: `${prefix}.duckdb_1.lost_or_repeated`, value: one.lostOrRepeated, unit: 'spans', target: '<= 0' },
    { name: `${prefix}.postgres_2.lost_or_repeated`, value: two.lostOrRepeated, unit: 'spans', target: '<= 0' },
  ];
}

/** The ingest part of the scale-out benchmark: each workload through (a), (b) and (c). */
export async function scaleOutIngest(cluster: PostgresCluster, size: Size): Promise<Figure[]> {
  const out: Figure[] = [];
  for (const workload of sized(size, WORKLOADS, WORKLOADS.slice(0, 1)))
    out.push(...(await measure(workload, cluster, size)));
  return out;
}
