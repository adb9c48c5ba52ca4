import { join } from 'node:path';
import { httpRequest } from '../src/client/http-request.js';
import { StoreClient } from '../src/client/store-client.js';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

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

export interface RolloutRun {
  rolloutsPerSec: number;
  lost: number;
  duplicated: number;
  spans: number;
}

/**
 * Agent Lightning's store benchmark shape: an algorithm enqueues rollouts in batches and waits
 * for them; N runners dequeue, send TURNS turns of 2 spans through OTLP, and mark the attempt
 * succeeded. Every rollout must finish exactly once, with one attempt and all its spans.
 */
export async function runRollouts(runners: number, rollouts = ROLLOUTS): Promise<RolloutRun> {
  const dir = await newTempDir();
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'store-bench.duckdb')]);
  try {
    return await driveRollouts([serve.url], runners, { rollouts });
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
    await removeDir(dir);
  }
}

/**
 * The loop of `runRollouts` against running servers: runner i talks to server i mod their count
 * (its dequeues, spans and updates), the algorithm to the first. `spans` counts the spans the
 * servers hold (with several servers on one PostgreSQL, each holds its own).
 */
export async function driveRollouts(
  urls: string[],
  runners: number,
  { rollouts = ROLLOUTS, turns = TURNS } = {},
): Promise<RolloutRun> {
  const algorithm = new StoreClient(urls[0]);
  const start = performance.now();
  let done = false;
  const completed: string[] = [];
  const runner = async (index: number) => {
    const url = urls[index % urls.length];
    const client = new StoreClient(url);
    while (!done) {
      const rollout = await client.dequeueRollout({ workerId: `runner-${index}`, waitSeconds: 0.5 });
      if (!rollout) continue;
      for (let turn = 0; turn < turns; turn++) {
        const body = turnSpans(rollout.rollout_id, rollout.attempt.attempt_id, turn);
        const response = await httpRequest(
          `${url}/v1/traces`,
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
  for (let i = 0; i < rollouts; i += ENQUEUE_BATCH) {
    const batch = await algorithm.enqueueManyRollouts(
      Array.from({ length: Math.min(ENQUEUE_BATCH, rollouts - i) }, (_, k) => ({ input: { task: i + k } })),
    );
    ids.push(...batch.map((r) => r.rollout_id));
  }
  const finished = await algorithm.waitForRollouts(ids, 600);
  const seconds = (performance.now() - start) / 1000;
  done = true;
  await Promise.all(workers);
  const attempts = await algorithm.queryRollouts({ rollout_id_in: ids });
  const multiAttempt = attempts.items.filter((r) => 'attempt' in r && r.attempt.sequence_id !== 1).length;
  let spans = 0;
  for (const url of urls) spans += (await new StoreClient(url).statistics()).total_spans;
  return {
    rolloutsPerSec: finished.length / seconds,
    lost: ids.length - finished.filter((r) => r.status === 'succeeded').length,
    duplicated: completed.length - new Set(completed).size + multiAttempt,
    spans,
  };
}

export const store: Benchmark = {
  name: 'store',
  description: `LightningStore: ${ROLLOUTS} rollouts, each dequeue + ${TURNS} turns of 2 OTLP spans + update, with 32 and 256 runners`,
  async run(size: Size): Promise<Figure[]> {
    const figures: Figure[] = [];
    const rollouts = sized(size, ROLLOUTS, 64);
    for (const runners of sized(size, [32, 256], [32])) {
      const result = await runRollouts(runners, rollouts);
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
          target: `>= ${rollouts * TURNS * 2}`,
        },
      );
    }
    return figures;
  },
};
