import { join } from 'node:path';
import { httpRequest } from '../src/client/http-request.js';
import { StoreClient } from '../src/client/store-client.js';
import { newTempDir, removeDir, spawnServe } from '../test/helpers.js';
import type { Benchmark, Figure } from './figures.js';

const ROLLOUTS = 2000;
const TURNS = 6;
const ENQUEUE_BATCH = 64;

/** Two spans of one turn of a rollout's attempt, as OTLP/JSON. */
function turnSpans(rolloutId: string, attemptId: string, turn: number): string {
  const traceId = Buffer.from(`${rolloutId}${attemptId}`.padEnd(16, '0').slice(0, 16)).toString('hex');
  const span = (i: number, name: string) => ({
    traceId,
    spanId: (turn * 2 + i + 1).toString(16).padStart(16, '0'),
    name,
    startTimeUnixNano: String(BigInt(Date.now()) * 1_000_000n),
    endTimeUnixNano: String(BigInt(Date.now()) * 1_000_000n + 1000n),
    attributes: [{ key: 'turn', value: { intValue: String(turn) } }],
  });
  return JSON.stringify({
    resourceSpans: [
      {
        resource: {
          attributes: [
            { key: 'agentlightning.rollout_id', value: { stringValue: rolloutId } },
            { key: 'agentlightning.attempt_id', value: { stringValue: attemptId } },
          ],
        },
        scopeSpans: [{ spans: [span(0, 'llm'), span(1, 'tool')] }],
      },
    ],
  });
}

/**
 * Agent Lightning's store benchmark shape: an algorithm enqueues rollouts in batches and waits
 * for them; N runners dequeue, send TURNS turns of 2 spans through OTLP, and mark the attempt
 * succeeded. Every rollout must finish exactly once, with one attempt and all its spans.
 */
export async function runRollouts(
  runners: number,
): Promise<{ rolloutsPerSec: number; lost: number; duplicated: number; spans: number }> {
  const dir = await newTempDir();
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'store-bench.duckdb')]);
  try {
    const algorithm = new StoreClient(serve.url);
    const start = performance.now();
    let done = false;
    const completed: string[] = [];
    const runner = async (index: number) => {
      const client = new StoreClient(serve.url);
      while (!done) {
        const rollout = await client.dequeueRollout({ workerId: `runner-${index}`, waitSeconds: 0.5 });
        if (!rollout) continue;
        for (let turn = 0; turn < TURNS; turn++) {
          const body = turnSpans(rollout.rollout_id, rollout.attempt.attempt_id, turn);
          const response = await httpRequest(
            `${serve.url}/v1/traces`,
            'POST',
            { 'content-type': 'application/json' },
            body,
            30_000,
          );
          if (response.status !== 200) throw new Error(`OTLP answered ${response.status}`);
        }
        await client.updateAttempt(rollout.rollout_id, rollout.attempt.attempt_id, { status: 'succeeded' });
        completed.push(rollout.rollout_id);
      }
    };
    const workers = Array.from({ length: runners }, (_, i) => runner(i));
    const ids: string[] = [];
    for (let i = 0; i < ROLLOUTS; i += ENQUEUE_BATCH) {
      const batch = await algorithm.enqueueManyRollouts(
        Array.from({ length: Math.min(ENQUEUE_BATCH, ROLLOUTS - i) }, (_, k) => ({ input: { task: i + k } })),
      );
      ids.push(...batch.map((r) => r.rollout_id));
    }
    const finished = await algorithm.waitForRollouts(ids, 600);
    const seconds = (performance.now() - start) / 1000;
    done = true;
    await Promise.all(workers);
    const attempts = await algorithm.queryRollouts({ rollout_id_in: ids });
    const multiAttempt = attempts.items.filter((r) => 'attempt' in r && r.attempt.sequence_id !== 1).length;
    const stats = await algorithm.statistics();
    return {
      rolloutsPerSec: finished.length / seconds,
      lost: ids.length - finished.filter((r) => r.status === 'succeeded').length,
      duplicated: completed.length - new Set(completed).size + multiAttempt,
      spans: stats.total_spans,
    };
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
    await removeDir(dir);
  }
}

export const store: Benchmark = {
  name: 'store',
  description: `LightningStore: ${ROLLOUTS} rollouts, each dequeue + ${TURNS} turns of 2 OTLP spans + update, with 32 and 256 runners`,
  async run(): Promise<Figure[]> {
    const figures: Figure[] = [];
    for (const runners of [32, 256]) {
      const result = await runRollouts(runners);
      figures.push(
        {
          name: `store.runners_${runners}.rollouts_per_s`,
          value: Math.round(result.rolloutsPerSec),
          unit: 'rollouts/s',
          target: '>= 500',
        },
        { name: `store.runners_${runners}.lost_rollouts`, value: result.lost, unit: 'rollouts', target: '<= 0' },
        {
          name: `store.runners_${runners}.duplicated_rollouts`,
          value: result.duplicated,
          unit: 'rollouts',
          target: '<= 0',
        },
        {
          name: `store.runners_${runners}.spans_stored`,
          value: result.spans,
          unit: 'spans',
          target: `>= ${ROLLOUTS * TURNS * 2}`,
        },
      );
    }
    return figures;
  },
};
