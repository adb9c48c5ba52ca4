import { readFileSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { computeAdvantages } from '../src/algorithms/grpo/advantages.js';
import { arrowStream } from '../src/algorithms/grpo/arrow.js';
import { buildRows, type StepRollout } from '../src/algorithms/grpo/batch.js';
import { WATERMARK } from '../src/sql/derived.js';
import { httpRequest } from '../src/client/http-request.js';
import { QueryClient } from '../src/client/query-client.js';
import { freshCopy, makeBatch } from '../test/support/otlp-batches.js';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { rolloutRewardsSql, rolloutsPath } from '../web/src/queries.js';
import { type Benchmark, type Figure, percentile, sized, type Size } from './figures.js';
import { startLlmServer } from './gateway.js';

// One server under the mixed load of a team's training week, for minutes: what grows (memory,
// latency, the file) and whether anything is lost. AGL_SOAK_MINUTES sets the length (default 10),
// AGL_SOAK_WARMUP_MINUTES the time before the figures that compare (default 1), and
// AGL_SOAK_MEMORY_LIMIT the server's --memory-limit (default the server's own): a run long enough
// for DuckDB's cache of the growing file to reach that limit within its warm-up measures what
// grows beside it.
const MINUTES = Number(process.env.AGL_SOAK_MINUTES ?? 10);
const WARMUP_MINUTES = Number(process.env.AGL_SOAK_WARMUP_MINUTES ?? 1);
const MEMORY_LIMIT = process.env.AGL_SOAK_MEMORY_LIMIT;
const RUNNERS = 32;
const MEMORY_PROBE = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps', 'memory-probe.mjs');
const GROUP = 8;

type Json = Record<string, unknown>;

/** A sample of bench/apps/memory-probe.mjs: process.memoryUsage() and RSS by kind of mapping, bytes. */
interface MemoryProbe {
  seconds: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  brk: number;
  arenas: number;
  anonymous: number;
}

/** Latencies (ms) by request kind and time bucket. */
class Latencies {
  private readonly byKind = new Map<string, number[][]>();
  constructor(
    private readonly start: number,
    private readonly bucketMs: number,
  ) {}

  async time<T>(kind: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const value = await work();
    const buckets = this.byKind.get(kind) ?? [];
    this.byKind.set(kind, buckets);
    const bucket = Math.floor((started - this.start) / this.bucketMs);
    buckets[bucket] ??= [];
    buckets[bucket].push(performance.now() - started);
    return value;
  }

  /** Each kind's p99 in its first and its last bucket that has samples. */
  firstAndLast(): { kind: string; first: number; last: number }[] {
    return [...this.byKind].map(([kind, buckets]) => {
      const filled = buckets.filter((b) => b !== undefined && b.length > 0);
      const p99 = (b: number[]) =>
        percentile(
          [...b].sort((x, y) => x - y),
          99,
        );
      return { kind, first: p99(filled[0]), last: p99(filled[filled.length - 1]) };
    });
  }
}

/** Requests the server answered 503 (busy, or out of memory for now), each retried after its Retry-After. */
const retried = { count: 0, last: '' };

/** A request to agl that a 503 repeats, as agl's runners and OTLP exporters do. */
async function requestRetrying(
  url: string,
  method: string,
  headers: Record<string, string>,
  body: string | Buffer | undefined,
): ReturnType<typeof httpRequest> {
  for (;;) {
    const answer = await httpRequest(url, method, headers, body, 60_000);
    if (answer.status !== 503) return answer;
    retried.count++;
    retried.last = answer.body.slice(0, 300);
    await sleep(1000 * Math.min(5, Number(answer.headers['retry-after'] ?? 1) || 1));
  }
}

/** A JSON call to agl; anything but `expect` (or a 503, retried) throws, naming the call. */
async function call(url: string, method: string, body?: unknown, expect = 200): Promise<unknown> {
  const json = body === undefined ? undefined : JSON.stringify(body);
  const answer = await requestRetrying(url, method, { 'content-type': 'application/json' }, json);
  if (answer.status !== expect) throw new Error(`${method} ${url}: ${answer.status} ${answer.body.slice(0, 300)}`);
  return answer.body ? JSON.parse(answer.body) : null;
}

const DUCKDB_MEMORY_SQL = `SELECT sum(memory_usage_bytes) FILTER (WHERE tag = 'BASE_TABLE') AS file,
  sum(memory_usage_bytes) AS total,
  (SELECT max(commit_seq) FROM spans) - ${WATERMARK} AS backlog
  FROM duckdb_memory()`;

const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;

/**
 * The least-squares slope of y over x, and its standard error: RSS swings by hundreds of MB with
 * the reads in flight when a sample falls, so a 10-minute fit can be off by more than the goal.
 */
function slope(points: readonly [number, number][]): { slope: number; error: number } {
  const n = points.length;
  if (n < 3) return { slope: 0, error: Number.POSITIVE_INFINITY };
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const sxy = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0);
  const sxx = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  if (sxx === 0) return { slope: 0, error: Number.POSITIVE_INFINITY };
  const b = sxy / sxx;
  const residuals = points.reduce((s, [x, y]) => s + (y - my - b * (x - mx)) ** 2, 0);
  return { slope: b, error: Math.sqrt(residuals / (n - 2) / sxx) };
}

/** Each bucket's lowest sample: what stays between the reads, which a leak raises and a read's working memory does not. */
function lowestEach(points: readonly [number, number][], bucketHours: number): [number, number][] {
  const lowest = new Map<number, [number, number]>();
  for (const point of points) {
    const bucket = Math.floor(point[0] / bucketHours);
    const held = lowest.get(bucket);
    if (held === undefined || point[1] < held[1]) lowest.set(bucket, point);
  }
  return [...lowest.values()];
}

const slopeFigure = (name: string, points: readonly [number, number][], target = '') => {
  const fit = slope(points);
  return { name, value: Math.round(fit.slope), unit: `MB/hour (+- ${Math.round(fit.error)})`, target };
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `agl serve` for MINUTES under OTLP ingest of agent-shaped traces, 32 runners cycling
 * rollouts through the gateway with a feedback post each, dashboard and SQL reads every second,
 * and a GRPO batch every minute. Reported: the server's RSS at start, at the end and after the
 * load, and its slope after warm-up (a fit over samples every 10 s), beside DuckDB's share of it
 * (`duckdb_memory()` through the query route), each request kind's p99 in the last minute
 * against the first, the file against what was sent, and rollouts and spans lost or doubled.
 */
export const soak: Benchmark = {
  name: 'soak',
  description: `${MINUTES} min of mixed load on one server${MEMORY_LIMIT === undefined ? '' : ` (--memory-limit ${MEMORY_LIMIT})`}: ingest, ${RUNNERS} runners through the gateway, feedback, reads, GRPO batches`,
  async run(size: Size): Promise<Figure[]> {
    const seconds = sized(size, MINUTES * 60, 6);
    const [bucketMs, sampleMs, warmupMs, grpoEveryMs, ingestEveryMs, idleMs] = sized(
      size,
      [60_000, 10_000, WARMUP_MINUTES * 60_000, 60_000, 100, 30_000],
      [2_000, 500, 1_500, 3_000, 100, 1_000],
    );
    const dir = await newTempDir();
    const db = join(dir, 'soak.duckdb');
    const llm = await startLlmServer();
    const probeFile = join(dir, 'memory.jsonl');
    const limit = MEMORY_LIMIT === undefined ? [] : ['--memory-limit', MEMORY_LIMIT];
    const serve = await spawnServe(['--quiet', '--db', db, '--upstream', llm.baseURL, '--return-token-ids', ...limit], {
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import ${pathToFileURL(MEMORY_PROBE).href}`,
      AGL_MEMORY_PROBE_FILE: probeFile,
      AGL_MEMORY_PROBE_MS: String(sampleMs),
    });
    const base = serve.url;
    const pid = serve.child.pid as number;
    Object.assign(retried, { count: 0, last: '' });
    const start = performance.now();
    const deadline = start + seconds * 1000;
    const latencies = new Latencies(start, bucketMs);
    const running = () => performance.now() < deadline;
    const rss: [number, number][] = [];
    // DuckDB's memory by its accounting, sampled with RSS: its cache of the file, and the rest.
    // And the spans stored but not derived yet, which every read of the views derives on the fly.
    const duckdb: { hours: number; rss: number; file: number; total: number; backlog: number }[] = [];
    let otlpBytes = 0;
    let spansSent = 0;
    const enqueued = new Set<string>();
    const succeeded: { rolloutId: string; attemptId: string }[] = [];
    const taken = new Map<string, number>();
    let grpoRows = 0;
    try {
      const template = await makeBatch(64, { promptBytes: 2_000 });
      const query = new QueryClient(base);
      const sampler = (async () => {
        while (running()) {
          rss.push([(performance.now() - start) / 3_600_000, rssMb(pid)]);
          await sleep(sampleMs);
        }
      })();
      const duckdbSampler = (async () => {
        while (running()) {
          const [memory] = (await query.query(DUCKDB_MEMORY_SQL)).rows as {
            file: number;
            total: number;
            backlog: number;
          }[];
          duckdb.push({
            hours: (performance.now() - start) / 3_600_000,
            rss: rssMb(pid),
            file: Number(memory.file) / 2 ** 20,
            total: Number(memory.total) / 2 ** 20,
            backlog: Number(memory.backlog ?? 0),
          });
          await sleep(sampleMs);
        }
      })();
      const ingest = (async () => {
        for (let serial = 1; running(); serial++) {
          const body = freshCopy(template, serial);
          const answer = await latencies.time('otlp', () =>
            requestRetrying(`${base}/v1/traces`, 'POST', { 'content-type': 'application/x-protobuf' }, body),
          );
          if (answer.status !== 200) throw new Error(`OTLP export answered ${answer.status}: ${answer.body}`);
          otlpBytes += body.length;
          spansSent += template.spanCount;
          await sleep(ingestEveryMs);
        }
      })();
      const runner = async (worker: number) => {
        for (;;) {
          if (running()) {
            const [made] = (await latencies.time('enqueue', () =>
              call(`${base}/v1/agl/queues/rollouts/enqueue`, 'POST', { rollouts: [{ input: { worker } }] }, 201),
            )) as Json[];
            enqueued.add(made.rollout_id as string);
          }
          const [next] = (await latencies.time('dequeue', () =>
            call(`${base}/v1/agl/queues/rollouts/dequeue`, 'POST', { worker_id: `w-${worker}` }),
          )) as Json[];
          if (next === undefined) {
            if (running()) continue;
            return; // the queue is empty after the deadline: this runner is done
          }
          const rid = next.rollout_id as string;
          const aid = (next.attempt as Json).attempt_id as string;
          taken.set(rid, (taken.get(rid) ?? 0) + 1);
          await latencies.time('gateway', () =>
            call(`${base}/v1/gateway/rollouts/${rid}/attempts/${aid}/v1/chat/completions`, 'POST', {
              model: 'agent',
              messages: [{ role: 'user', content: `task ${rid}` }],
            }),
          );
          await latencies.time('feedback', () =>
            call(
              `${base}/v1/agl/feedback`,
              'POST',
              { rollout_id: rid, attempt_id: aid, name: 'reward', value: rid.length % 2 },
              201,
            ),
          );
          await latencies.time('attempt_update', () =>
            call(`${base}/v1/agl/rollouts/${rid}/attempts/${aid}`, 'POST', { status: 'succeeded' }),
          );
          succeeded.push({ rolloutId: rid, attemptId: aid });
        }
      };
      const runners = Promise.all(Array.from({ length: RUNNERS }, (_, i) => runner(i)));
      const reads = (async () => {
        while (running()) {
          await latencies.time('dashboard', async () => {
            const page = (await call(
              `${base}${rolloutsPath({ sort: 'start_time', order: 'desc', offset: 0, limit: 50 })}`,
              'GET',
            )) as { items: { rollout_id: string }[] };
            await query.query(rolloutRewardsSql(page.items.map((r) => r.rollout_id)));
          });
          await latencies.time('sql', () =>
            query.query('SELECT count(*) AS n, sum(output_tokens) AS t FROM llm_calls'),
          );
          await sleep(1_000);
        }
      })();
      const grpo = (async () => {
        for (let at = start + grpoEveryMs; at < deadline; at += grpoEveryMs) {
          await sleep(at - performance.now());
          const group = succeeded.slice(-64);
          const rollouts: StepRollout[] = group.map((r, i) => ({
            rolloutId: r.rolloutId,
            attemptId: r.attemptId,
            status: 'succeeded',
            groupId: `g-${Math.floor(i / GROUP)}`,
            modelVersion: '0',
            versionIndex: 0,
          }));
          await latencies.time('grpo_batch', async () => {
            const built = await buildRows(query, rollouts, {
              aggregation: 'trajectory',
              credit: 'final',
              gamma: 1,
              overlong: 'drop',
              oldestVersionIndex: 0,
            });
            const advantages = computeAdvantages(built.rows, { estimator: 'grpo', epsilon: 1e-6, rolloutLevel: false });
            arrowStream({
              batchId: `soak-${at}`,
              step: 1,
              modelVersion: '0',
              estimator: 'grpo',
              aggregation: 'trajectory',
              rows: built.rows,
              advantages: advantages.values,
              settings: { steps: 1, batchSize: rollouts.length / GROUP, groupSize: GROUP },
            });
            grpoRows += built.rows.length;
          });
        }
      })();
      await Promise.all([sampler, duckdbSampler, ingest, runners, reads, grpo]);
      const end = rssMb(pid);

      const [rollouts] = (
        await query.query(
          `SELECT count(*) FILTER (WHERE status = 'succeeded') AS done, count(*) AS n,
            (SELECT count(*) FROM attempts) AS attempts FROM rollouts`,
        )
      ).rows as { done: number; n: number; attempts: number }[];
      const [spans] = (
        await query.query(
          `SELECT count(*) AS n, count(DISTINCT (trace_id, span_id)) AS d FROM spans WHERE service_name = 'agl-bench'`,
        )
      ).rows as { n: number; d: number }[];
      const lostRollouts = enqueued.size - Number(rollouts.done);
      const doubledRollouts =
        [...taken.values()].filter((n) => n > 1).length + (Number(rollouts.attempts) - Number(rollouts.n));
      const lostSpans = spansSent - Number(spans.d);
      const doubledSpans = Number(spans.n) - Number(spans.d);
      await query.close();
      // What the server gives back once the load stops: what a leak holds stays, a read's working memory goes.
      await sleep(idleMs);
      const idle = rssMb(pid);
      const fileBytes = (
        await Promise.all(
          [db, `${db}.wal`].map((p) =>
            stat(p).then(
              (s) => s.size,
              () => 0,
            ),
          ),
        )
      ).reduce((a, b) => a + b, 0);
      const duckdbAfterWarmup = duckdb.filter((m) => m.hours * 3_600_000 >= warmupMs);
      const afterWarmup = rss.filter(([hours]) => hours * 3_600_000 >= warmupMs);
      const probes = (await readFile(probeFile, 'utf8'))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as MemoryProbe)
        .filter((p) => p.seconds * 1000 >= warmupMs);
      const probeSlope = (name: string, bytes: (p: MemoryProbe) => number) =>
        slopeFigure(
          name,
          probes.map((p): [number, number] => [p.seconds / 3600, bytes(p) / 2 ** 20]),
        );
      const rssAfterWarmup = afterWarmup.map(([, mb]) => mb);
      const p99s = latencies.firstAndLast();
      const worst = Math.max(...p99s.map((p) => p.last / Math.max(p.first, 1)));
      const figures: Figure[] = [
        { name: 'server RSS at start', value: Math.round(rss[0]?.[1] ?? 0), unit: 'MB', target: '' },
        { name: 'server RSS at end', value: Math.round(end), unit: 'MB', target: '' },
        { name: `server RSS after ${idleMs / 1000} s idle`, value: Math.round(idle), unit: 'MB', target: '' },
        slopeFigure('server RSS slope after warm-up', afterWarmup, '< 20'),
        slopeFigure(
          `server RSS slope after warm-up, each ${bucketMs / 1000} s's lowest sample`,
          lowestEach(afterWarmup, bucketMs / 3_600_000),
        ),
        {
          name: 'server RSS after warm-up, lowest sample',
          value: Math.round(Math.min(...rssAfterWarmup)),
          unit: `MB (highest ${Math.round(Math.max(...rssAfterWarmup))})`,
          target: '',
        },
        // agl's own objects (maps of rollouts, attempts, sequence ids; buffers): what RSS holds
        // besides DuckDB, whose memory swings by hundreds of MB with reads and checkpoints.
        probeSlope('server JS heap slope after warm-up', (p) => p.heapUsed),
        // Where the rest of RSS lives (memory-probe.mjs), each sampled in the server at once.
        probeSlope('server buffers outside the JS heap, slope after warm-up', (p) => p.external),
        probeSlope(
          "server glibc heaps (malloc's main heap and thread arenas), slope after warm-up",
          (p) => p.brk + p.arenas,
        ),
        probeSlope(
          "server other anonymous memory less V8's heap (DuckDB's allocator, buffers), slope after warm-up",
          (p) => p.anonymous - p.heapTotal,
        ),
        slopeFigure(
          "server RSS less DuckDB's memory (its accounting), slope after warm-up",
          duckdbAfterWarmup.map((m) => [m.hours, m.rss - m.total]),
        ),
        slopeFigure(
          "DuckDB's cache of the file, slope after warm-up",
          duckdbAfterWarmup.map((m) => [m.hours, m.file]),
        ),
        {
          name: "DuckDB's memory at the last sample, its cache of the file",
          value: Math.round(duckdb.at(-1)?.total ?? 0),
          unit: `MB (${Math.round(duckdb.at(-1)?.file ?? 0)} MB)`,
          target: '',
        },
        {
          name: 'spans not derived yet, highest sample in the first / the last minute',
          value: Math.max(0, ...duckdb.filter((m) => m.hours * 3_600_000 < bucketMs).map((m) => m.backlog)),
          unit: `spans (last: ${Math.max(0, ...duckdb.filter((m) => m.hours * 3_600_000 >= seconds * 1000 - bucketMs).map((m) => m.backlog))})`,
          target: '',
        },
        ...p99s.map(({ kind, first, last }) => ({
          name: `${kind} p99, last minute / first`,
          value: Number((last / Math.max(first, 1)).toFixed(2)),
          unit: `ratio (${first.toFixed(0)} -> ${last.toFixed(0)} ms)`,
          target: '',
        })),
        {
          name: 'worst p99 ratio, last minute / first',
          value: Number(worst.toFixed(2)),
          unit: 'ratio',
          target: '<= 1.5',
        },
        {
          name: 'requests answered 503 and retried',
          value: retried.count,
          unit: retried.count === 0 ? 'requests' : `requests (the last: ${retried.last})`,
          target: '',
        },
        { name: 'rollouts run', value: enqueued.size, unit: 'rollouts', target: '' },
        { name: 'GRPO batch rows built', value: grpoRows, unit: 'rows', target: '' },
        { name: 'database file', value: Number((fileBytes / 2 ** 20).toFixed(1)), unit: 'MB', target: '' },
        {
          name: 'database file / OTLP bytes sent',
          value: Number((fileBytes / Math.max(otlpBytes, 1)).toFixed(2)),
          unit: `ratio (${(otlpBytes / 2 ** 20).toFixed(1)} MB sent)`,
          target: '',
        },
        { name: 'rollouts lost', value: lostRollouts, unit: 'rollouts', target: '<= 0' },
        { name: 'rollouts run twice', value: doubledRollouts, unit: 'rollouts', target: '<= 0' },
        { name: 'spans lost', value: lostSpans, unit: 'spans', target: '<= 0' },
        { name: 'spans stored twice', value: doubledSpans, unit: 'spans', target: '<= 0' },
      ];
      // Nothing lost is not a figure to watch but a fault: the smoke run in npm test fails on it.
      const losses = figures.filter((f) => /lost|twice/.test(f.name) && f.value !== 0);
      if (losses.length > 0)
        throw new Error(`soak: ${losses.map((f) => `${f.name} ${f.value}`).join(', ')}\n${JSON.stringify(figures)}`);
      return figures;
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
      llm.stop();
      await removeDir(dir);
    }
  },
};
