import { spawn, type ChildProcess, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { QueryClient } from '../client/query-client.js';
import { StoreClient } from '../client/store-client.js';
import { startServer } from '../collector/server.js';
import { recordTo } from '../instrumentation/telemetry.js';
import type { LightningStore } from '../api/lightning-store.js';
import { DuckDBStore } from '../store/store.js';
import { FINISHED_ROLLOUT_STATUSES, type NamedResources, type Span } from '../api/types.js';
import type { Agent } from '../runner/agent.js';
import type { Algorithm } from '../algorithms/algorithm.js';
import { finalRewards } from '../adapters/final-rewards.js';
import { Baseline, type BaselineResult } from '../algorithms/baseline.js';
import { loadDataset, type Dataset } from './dataset.js';
import { progressLine } from './progress.js';
import { loadAgent } from '../runner/load-agent.js';
import { flushSpans, Runner } from '../runner/runner.js';
import type { QuerySource } from '../adapters/source.js';

export interface TrainerOptions<T, R> {
  readonly algorithm: Algorithm<T, R>;
  /** Rollouts run at once: async workers in-process, runner processes with `processes` (default 1). */
  readonly nRunners?: number;
  /** Rollouts each runner process runs at once, with `processes` (default 1). */
  readonly runnerConcurrency?: number;
  /**
   * `in-process` (default): the store embedded and served here, runners as async workers.
   * `processes`: `agl serve` and `nRunners` `agl runner` processes, started and stopped here;
   * the agent must then be given as the path of its module.
   */
  readonly strategy?: 'in-process' | 'processes';
  /** The DuckDB file (default ./agl.duckdb). */
  readonly db?: string;
  /**
   * The server's port on 127.0.0.1 (default 0: any free one). Give one when another process must
   * find it: a trainer pulling GRPO batches, an agent of another language.
   */
  readonly port?: number;
  /** The model server for rollouts whose resources have no `llm` (the gateway's --upstream). */
  readonly upstream?: string;
  /**
   * Seconds a runner waits for a store that is away before it stops (Runner's
   * maxStoreDowntimeSeconds; `agl runner --max-store-downtime` for runner processes). Default: no limit.
   */
  readonly maxStoreDowntimeSeconds?: number;
  /** Seconds runner and server processes get to stop after a signal before they are killed (default 10). */
  readonly graceSeconds?: number;
  /** A progress line on stderr (default: when stderr is a terminal). */
  readonly progress?: boolean;
}

/** What fit runs on: the store the algorithm and runners meet at, SQL over it, and how to stop it all. */
interface Runtime {
  readonly store: LightningStore;
  readonly source: QuerySource;
  /** The agl server's URL. */
  readonly url: string;
  close(): Promise<void>;
}

const CLI = fileURLToPath(new URL('./cli.js', import.meta.url));

/**
 * Wires an algorithm, the store and runners together, and stops them all when the algorithm
 * is done or on Ctrl-C (a second one kills the processes at once).
 */
export class Trainer<T = unknown, R = unknown> {
  constructor(private readonly options: TrainerOptions<T, R>) {
    const strategy = options.strategy ?? 'in-process';
    if (strategy !== 'in-process' && strategy !== 'processes')
      throw new TypeError(`strategy must be "in-process" or "processes", not "${options.strategy}"`);
    const n = options.nRunners ?? 1;
    if (!Number.isInteger(n) || n < 1)
      throw new TypeError(`nRunners must be a whole number of at least 1, not ${options.nRunners}`);
  }

  /** Runs the algorithm over the tasks (arrays, or .jsonl/.json/.parquet files) with runners of `agent`. */
  async fit(agent: Agent<T> | string, data: { train: Dataset<T>; val?: Dataset<T> }): Promise<R> {
    const train = await loadDataset(data.train);
    const val = await loadDataset(data.val ?? []);
    const stop = new AbortController();
    let runtime: Runtime | undefined;
    let signals = 0;
    // Handled from the start: a Ctrl-C while the processes start still stops them.
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      console.error(
        signals === 1
          ? `agl: ${signal}: stopping the algorithm and the runners (again to kill them)`
          : `agl: ${signal} again: killing`,
      );
      stop.abort(new Error(`stopped by ${signal}`));
      if (signals > 1) void runtime?.close();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    let progress: { stop(): Promise<void> } | undefined;
    try {
      runtime =
        this.options.strategy === 'processes' ? await this.startProcesses(agent) : await this.startInProcess(agent);
      if (this.options.progress ?? process.stderr.isTTY) progress = watchProgress(runtime, train.length + val.length);
      return await this.options.algorithm.run({
        store: runtime.store,
        source: runtime.source,
        serverUrl: runtime.url,
        train,
        val,
        signal: stop.signal,
      });
    } finally {
      await progress?.stop();
      stop.abort();
      await runtime?.close();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
  }

  /**
   * Runs a few tasks once with the Baseline, in this process, and prints each rollout with its
   * spans: for trying an agent out before training it.
   */
  async dev(
    agent: Agent<T> | string,
    tasks: Dataset<T>,
    options: { resources?: NamedResources; print?: (line: string) => void } = {},
  ): Promise<BaselineResult> {
    const print = options.print ?? console.log;
    const stop = new AbortController();
    const runtime = await this.startInProcess(agent);
    try {
      const result = await new Baseline<T>({ resources: options.resources }).run({
        store: runtime.store,
        source: runtime.source,
        train: await loadDataset(tasks),
        val: [],
        signal: stop.signal,
      });
      for (const rollout of result.rollouts) {
        print(`rollout ${rollout.rollout_id}: ${rollout.status}, reward ${rollout.reward ?? '-'}`);
        const { items } = await runtime.store.querySpans({
          rollout_id: rollout.rollout_id,
          sort_by: 'sequence_id',
          sort_order: 'asc',
        });
        for (const line of spanTree(items)) print(`  ${line}`);
      }
      return result;
    } finally {
      stop.abort();
      await runtime.close();
    }
  }

  /**
   * The store embedded, served here, and runners as async workers. The runners stop when the
   * runtime closes, not at the first Ctrl-C: the algorithm decides what to finish first (APO its
   * evaluation in flight), and a second Ctrl-C closes the runtime at once.
   */
  private async startInProcess(agent: Agent<T> | string): Promise<Runtime> {
    const runAgent = typeof agent === 'string' ? ((await loadAgent(agent)) as Agent<T>) : agent;
    const store = await DuckDBStore.open({ path: this.options.db ?? './agl.duckdb' });
    // AGL_TOKEN guards this server as it guards `agl serve` (external trainers, runners, the
    // dashboard send it); the spans recorded here carry it too (instrumentation/config.ts).
    const token = process.env.AGL_TOKEN || undefined;
    const server = await startServer(store, {
      port: this.options.port ?? 0,
      token,
      gateway: this.options.upstream ? { upstream: this.options.upstream } : {},
      training: this.options.algorithm.trainingBatches,
    }).catch(async (error: unknown) => {
      await store.close();
      throw error;
    });
    // The rollouts' spans go to this server, also when the process recorded elsewhere before.
    const recording = recordTo(server.url);
    const runners = new AbortController();
    const running = new Runner({
      store: store.lightning,
      agent: runAgent,
      concurrency: this.options.nRunners ?? 1,
      gatewayUrl: server.url,
      gatewayToken: token,
      maxStoreDowntimeSeconds: this.options.maxStoreDowntimeSeconds,
    }).run(runners.signal);
    let closing: Promise<void> | undefined;
    return {
      store: store.lightning,
      source: { stream: (sql, options) => store.streamQuery(sql, { ...options, guard: false }) },
      url: server.url,
      close: () =>
        (closing ??= (async () => {
          runners.abort();
          await running;
          await flushSpans();
          recording.restore();
          await server.close();
          await store.close();
        })()),
    };
  }

  private async startProcesses(agent: Agent<T> | string): Promise<Runtime> {
    if (typeof agent !== 'string')
      throw new TypeError(
        'the processes strategy runs the agent in runner processes: give the path of its module (export default rollout(...))',
      );
    if (this.options.algorithm.trainingBatches)
      throw new TypeError(
        "this algorithm serves training batches from the Trainer's own server, which the processes strategy does not run: train in process, or hand batches over as files (GRPO's batchesDir)",
      );
    const grace = 1000 * (this.options.graceSeconds ?? 10);
    const upstream = this.options.upstream ? ['--upstream', this.options.upstream] : [];
    // The run's own server on free ports: its runners post OTLP/HTTP, so no OTLP/gRPC port to claim.
    const server = spawn(
      process.execPath,
      [
        CLI,
        'serve',
        '--port',
        String(this.options.port ?? 0),
        '--grpc-port',
        '0',
        '--db',
        this.options.db ?? './agl.duckdb',
        '--quiet',
        ...upstream,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const url = await servingUrl(server);
    const runners = Array.from({ length: this.options.nRunners ?? 1 }, (_, i) =>
      spawn(
        process.execPath,
        [
          CLI,
          'runner',
          agent,
          '--store',
          url,
          '--worker-id',
          `trainer-${process.pid}-${i + 1}`,
          '--concurrency',
          String(this.options.runnerConcurrency ?? 1),
          ...(this.options.maxStoreDowntimeSeconds === undefined
            ? []
            : ['--max-store-downtime', String(this.options.maxStoreDowntimeSeconds)]),
        ],
        {
          stdio: ['ignore', 'inherit', 'inherit'],
          env: { ...process.env, AGL_ENDPOINT: url }, // their spans go to this server, whatever this process records to
        },
      ),
    );
    // The server it started requires AGL_TOKEN when one is set, as its runners send it.
    const token = process.env.AGL_TOKEN || undefined;
    let closing: Promise<void> | undefined;
    return {
      store: new StoreClient(url, { token }),
      source: new QueryClient(url, { token }),
      url,
      // Runners first (they finish or abandon their rollouts), then the server (it commits what it acknowledged).
      close: () =>
        (closing ??= (async () => {
          await Promise.all(runners.map((runner) => stopProcess(runner, 'SIGINT', grace)));
          await stopProcess(server, 'SIGTERM', grace);
        })()),
    };
  }
}

/** The URL that `agl serve` logs once it serves. */
function servingUrl(server: ChildProcessByStdio<null, Readable, null>): Promise<string> {
  return new Promise((resolve, reject) => {
    let output = '';
    server.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /serving on (http:\/\/\S+),/.exec(output);
      if (match) resolve(match[1]);
    });
    server.once('exit', (code) => reject(new Error(`agl serve exited (${code}) before serving: ${output}`)));
  });
}

/** Sends `signal`, then SIGKILL after `graceMs`; resolves when the process is gone. */
async function stopProcess(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Redraws "done/total rollouts, success rate, mean reward, rate" once a second from the store. */
function watchProgress({ store, source }: Runtime, total: number): { stop(): Promise<void> } {
  const line = progressLine('agl');
  const started = Date.now();
  const rewards = new Map<string, number | null>();
  let polling: Promise<void> = Promise.resolve();
  const poll = async () => {
    // This fit's rollouts only: the file may hold earlier runs.
    const finished = (await store.queryRollouts({ status_in: [...FINISHED_ROLLOUT_STATUSES], limit: -1 })).items.filter(
      (r) => r.start_time * 1000 >= started,
    );
    const fresh = finished.map((r) => r.rollout_id).filter((id) => !rewards.has(id));
    const read = await finalRewards(source, fresh, 'rollout');
    for (const id of fresh) rewards.set(id, read.get(id) ?? null);
    const succeeded = finished.filter((r) => r.status === 'succeeded').length;
    const values = [...rewards.values()].filter((r): r is number => r !== null);
    const mean = values.length ? (values.reduce((a, b) => a + b, 0) / values.length).toFixed(3) : '-';
    const rate = finished.length / Math.max(0.001, (Date.now() - started) / 1000);
    line.text(
      `${finished.length}/${total} rollouts, ${finished.length ? Math.round((100 * succeeded) / finished.length) : 0}% succeeded, mean reward ${mean}, ${rate.toFixed(1)}/s`,
    );
  };
  let pollFailed = false;
  const timer = setInterval(
    () =>
      (polling = polling.then(poll).catch((error: unknown) => {
        // Only the progress line goes stale (the fit itself waits on its own calls); said once, not every second.
        if (!pollFailed)
          console.error(`agl: the progress line stopped updating: ${(error as Error)?.message ?? String(error)}`);
        pollFailed = true;
      })),
    1000,
  );
  return {
    stop: async () => {
      clearInterval(timer);
      await polling;
      line.done();
    },
  };
}

/** A rollout's spans as an indented tree: name, duration, and what an LLM call or reward holds. */
function spanTree(spans: Span[]): string[] {
  const children = new Map<string | null, Span[]>();
  const ids = new Set(spans.map((s) => s.span_id));
  for (const span of spans) {
    const parent = span.parent_id && ids.has(span.parent_id) ? span.parent_id : null;
    children.set(parent, [...(children.get(parent) ?? []), span]);
  }
  const lines: string[] = [];
  const walk = (parent: string | null, depth: number) => {
    for (const span of children.get(parent) ?? []) {
      const a = span.attributes;
      const ms =
        span.start_time !== null && span.end_time !== null
          ? `${Math.round((span.end_time - span.start_time) * 1000)} ms`
          : '';
      const details = [
        a['gen_ai.request.model'] !== undefined ? `model ${a['gen_ai.request.model']}` : '',
        a['gen_ai.usage.input_tokens'] !== undefined
          ? `${a['gen_ai.usage.input_tokens']} in / ${a['gen_ai.usage.output_tokens'] ?? '?'} out tokens`
          : '',
        a['agentlightning.reward.0.value'] !== undefined ? `reward ${a['agentlightning.reward.0.value']}` : '',
        span.status.status_code === 'ERROR' ? `error: ${span.status.description ?? ''}` : '',
      ].filter(Boolean);
      lines.push(`${'  '.repeat(depth)}${span.name} ${ms}${details.length ? ` (${details.join(', ')})` : ''}`);
      walk(span.span_id, depth + 1);
    }
  };
  walk(null, 0);
  return lines;
}
