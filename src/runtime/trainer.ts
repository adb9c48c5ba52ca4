import { startServer } from '../collector/server.js';
import { startTelemetry } from '../instrumentation/telemetry.js';
import { DuckDBStore } from '../store/store.js';
import type { Agent } from './agent.js';
import type { Algorithm } from './algorithm.js';
import { Runner } from './runner.js';

export interface TrainerOptions<T, R> {
  readonly algorithm: Algorithm<T, R>;
  /** Rollouts run at once (default 1). */
  readonly nRunners?: number;
  /** Only `in-process` so far: the store embedded, runners as async workers of this process. */
  readonly strategy?: 'in-process';
  /** The DuckDB file (default ./agl.duckdb). */
  readonly db?: string;
  /** The model server for rollouts whose resources have no `llm` (the gateway's --upstream). */
  readonly upstream?: string;
}

/**
 * Wires an algorithm, the store and runners together. In-process: the store is opened here and
 * served on a free port of 127.0.0.1 (OTLP for this process's spans, the gateway for agents),
 * recording starts as with agl/register, and a Runner works the queue while the algorithm runs.
 */
export class Trainer<T = unknown, R = unknown> {
  constructor(private readonly options: TrainerOptions<T, R>) {
    if (options.strategy !== undefined && options.strategy !== 'in-process') throw new TypeError(`strategy must be "in-process" (the processes strategy is not built yet), not "${options.strategy}"`);
  }

  async fit(agent: Agent<T>, data: { train: readonly T[]; val?: readonly T[] }): Promise<R> {
    const store = await DuckDBStore.open({ path: this.options.db ?? './agl.duckdb' });
    const server = await startServer(store, { port: 0, gateway: this.options.upstream ? { upstream: this.options.upstream } : {} }).catch(async (error: unknown) => {
      await store.close();
      throw error;
    });
    // Recording goes to this server, unless the process records already (agl/register).
    process.env.AGL_ENDPOINT = server.url;
    startTelemetry();
    const stop = new AbortController();
    const runner = new Runner({ store: store.lightning, agent, concurrency: this.options.nRunners ?? 1, gatewayUrl: server.url });
    const running = runner.run(stop.signal);
    try {
      return await this.options.algorithm.run({ store: store.lightning, train: data.train, val: data.val ?? [], signal: stop.signal });
    } finally {
      stop.abort();
      await running;
      await server.close();
      await store.close();
    }
  }
}
