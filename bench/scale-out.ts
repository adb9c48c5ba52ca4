import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { startPostgres } from '../test/support/postgres.js';
import { cpuOf, sized, type Benchmark, type Figure, type Size } from './figures.js';
import { scaleOutIngest } from './scale-out-ingest.js';
import { driveRollouts, type RolloutRun } from './store.js';

const ROLLOUTS = 1000;
const RUNNERS = 32;
const SERVERS = [1, 2, 4];
/** Bare cycles, and with the turns of spans of the store benchmark. */
const WORKLOADS: readonly (readonly [string, number])[] = [
  ['cycles', 0],
  ['with_spans', 6],
];

/** CPU seconds of a PostgreSQL cluster so far: the postmaster, its backends, and those that ended. */
function clusterCpu(postmaster: number): number {
  const root = cpuOf(postmaster);
  let total = root.own + root.reaped;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const child = cpuOf(Number(entry));
      if (child.parent === postmaster) total += child.own;
    } catch {
      // ended meanwhile: counted in the postmaster's reaped time
    }
  }
  return total;
}

interface Measured extends RolloutRun {
  /** CPU milliseconds per rollout of the agl servers, and of PostgreSQL. */
  serversCpuMs: number;
  postgresCpuMs: number;
}

/**
 * `agl serve` processes on one state (a PostgreSQL URL, or none: each its own file), and the
 * store benchmark's loop against them, with the CPU the servers and PostgreSQL spent on it.
 */
async function measure(
  count: number,
  postgres: { url: string; pid: number } | null,
  turns: number,
  rollouts: number,
): Promise<Measured> {
  const dir = await newTempDir();
  const servers: Awaited<ReturnType<typeof spawnServe>>[] = [];
  try {
    for (let i = 0; i < count; i++)
      servers.push(
        await spawnServe([
          '--quiet',
          '--db',
          join(dir, `server-${i}.duckdb`),
          ...(postgres ? ['--state', postgres.url] : []),
        ]),
      );
    const cpu = () => ({
      servers: servers.reduce((sum, s) => sum + cpuOf(s.child.pid as number).own, 0),
      postgres: postgres ? clusterCpu(postgres.pid) : 0,
    });
    const before = cpu();
    const run = await driveRollouts(
      servers.map((s) => s.url),
      RUNNERS,
      { rollouts, turns },
    );
    const after = cpu();
    return {
      ...run,
      serversCpuMs: ((after.servers - before.servers) * 1000) / rollouts,
      postgresCpuMs: ((after.postgres - before.postgres) * 1000) / rollouts,
    };
  } finally {
    for (const server of servers) server.child.kill('SIGTERM');
    await Promise.all(servers.map((s) => s.exited));
    await removeDir(dir);
  }
}

function figures(name: string, run: Measured, withPostgres: boolean): Figure[] {
  return [
    { name: `${name}.rollouts_per_s`, value: Math.round(run.rolloutsPerSec), unit: 'rollouts/s', target: '' },
    { name: `${name}.lost_or_repeated`, value: run.lost + run.duplicated, unit: 'rollouts', target: '<= 0' },
    { name: `${name}.servers_cpu_per_rollout`, value: Number(run.serversCpuMs.toFixed(2)), unit: 'ms', target: '' },
    ...(withPostgres
      ? [
          {
            name: `${name}.postgres_cpu_per_rollout`,
            value: Number(run.postgresCpuMs.toFixed(2)),
            unit: 'ms',
            target: '',
          },
        ]
      : []),
  ];
}

/**
 * The store benchmark's loop (enqueue in batches, dequeue, complete; 32 runners spread over the
 * servers) against one server with its state in its DuckDB file, then 1, 2 and 4 servers on one
 * PostgreSQL (with its default durability: fsync on), each run on a fresh database. Once as bare
 * cycles (no spans), once with 6 turns of 2 OTLP spans per rollout, as the store benchmark. The
 * CPU per rollout of the servers and of PostgreSQL says what a machine of each can carry, which
 * a run with every process on one machine cannot show. Then OTLP ingest through nginx
 * (`scaleOutIngest`): two servers on PostgreSQL against one server with its state in its file.
 */
export const scaleOut: Benchmark = {
  name: 'scale-out',
  description: `${ROLLOUTS} rollouts, ${RUNNERS} runners: one server with its state in DuckDB, then ${SERVERS.join(', ')} servers on one PostgreSQL; OTLP ingest through nginx, 2 servers on PostgreSQL against 1 in DuckDB`,
  async run(size: Size): Promise<Figure[]> {
    const rollouts = sized(size, ROLLOUTS, 32);
    const cluster = await startPostgres({ durable: true });
    const out: Figure[] = [];
    try {
      // The smoke run: one workload, one fleet of more than one server (a server's start is seconds).
      const workloads = sized(size, WORKLOADS, WORKLOADS.slice(1));
      for (const [workload, turns] of workloads) {
        out.push(...figures(`scale_out.${workload}.duckdb_1`, await measure(1, null, turns, rollouts), false));
        for (const count of sized(size, SERVERS, [2])) {
          const postgres = { url: await cluster.createDatabase(), pid: cluster.pid };
          out.push(
            ...figures(
              `scale_out.${workload}.postgres_${count}`,
              await measure(count, postgres, turns, rollouts),
              true,
            ),
          );
        }
      }
      out.push(...(await scaleOutIngest(cluster, size)));
    } finally {
      await cluster.stop();
    }
    return out;
  },
};
