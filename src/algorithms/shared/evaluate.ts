import { finalRewards } from '../../adapters/final-rewards.js';
import { traceToRolloutMessages } from '../../adapters/messages.js';
import { allRows, type QuerySource } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { Rollout, RolloutMode } from '../../api/types.js';
import { waitUntilFinished } from '../algorithm.js';
import type { RolloutJudge } from '../judge/rollouts.js';
import type { RunTranscript } from './transcripts.js';

/**
 * Running prompts on tasks: every batch of one step goes into the queue at once (runners take
 * them in parallel), and each prompt's score is the mean of its rollouts' final rewards, a
 * rollout that failed, timed out or gave no reward counting 0.
 */

interface EvaluationRequest {
  readonly resourcesId: string;
  readonly tasks: readonly unknown[];
  readonly mode: RolloutMode;
  /** Kept on each rollout: which run, prompt version and round it evaluates. */
  readonly metadata: Record<string, unknown>;
}

export interface Evaluation {
  /** In task order. */
  readonly rollouts: readonly Rollout[];
  readonly rewards: readonly (number | null)[];
  readonly score: number;
  /** Rollouts that did not succeed. */
  readonly failed: number;
}

/**
 * Runs every request's tasks and waits for all of them; answers in request order, with the
 * seconds spent waiting for the rollouts (the rest is the algorithm's own work). With a `judge`,
 * the succeeded rollouts that brought no reward are judged, each alone, before they are scored.
 */
export async function evaluate(
  store: LightningStore,
  source: QuerySource,
  requests: readonly EvaluationRequest[],
  timeoutSeconds: number,
  judge?: RolloutJudge,
): Promise<{ evaluations: Evaluation[]; waitedSeconds: number }> {
  const queued = await store.enqueueManyRollouts(
    requests.flatMap((request) =>
      request.tasks.map((input) => ({
        input,
        mode: request.mode,
        resources_id: request.resourcesId,
        config: { timeout_seconds: timeoutSeconds },
        metadata: request.metadata,
      })),
    ),
  );
  const waitStarted = performance.now();
  // No signal: a stop request does not cut an evaluation short; the one in flight is finished
  // first (the Trainer keeps its runners until the algorithm returns).
  const finished = await waitUntilFinished(
    store,
    queued.map((r) => r.rollout_id),
  );
  const waitedSeconds = (performance.now() - waitStarted) / 1000;
  if (judge) await judge.scoreLatest([...finished.values()]);
  const rewards = await finalRewards(source, [...finished.keys()], 'rollout');
  let next = 0;
  const evaluations = requests.map((request) => {
    const rollouts = queued.slice(next, next + request.tasks.length).map((r) => finished.get(r.rollout_id) ?? r);
    next += request.tasks.length;
    const values = rollouts.map((r) => rewards.get(r.rollout_id) ?? null);
    return {
      rollouts,
      rewards: values,
      score: values.reduce<number>((sum, value) => sum + (value ?? 0), 0) / Math.max(1, values.length),
      failed: rollouts.filter((r) => r.status !== 'succeeded').length,
    };
  });
  return { evaluations, waitedSeconds };
}

const quote = (id: string) => `'${id.replaceAll("'", "''")}'`;

/**
 * The critic's view of each evaluation's rollouts: task, status, reward, each LLM call's
 * messages (TraceToMessages) and the feedback texts of its rewards, read in one query each for all of them.
 */
export async function transcripts(source: QuerySource, evaluations: readonly Evaluation[]): Promise<RunTranscript[][]> {
  const ids = evaluations.flatMap((e) => e.rollouts.map((r) => quote(r.rollout_id)));
  const calls = new Map<string, Record<string, unknown>[][]>();
  if (ids.length) {
    for await (const { rolloutId, record } of traceToRolloutMessages(source, {
      where: `rollout_id IN (${ids.join(', ')})`,
    })) {
      if (rolloutId !== null) calls.set(rolloutId, [...(calls.get(rolloutId) ?? []), record.messages]);
    }
  }
  const feedback = new Map<string, string[]>();
  if (ids.length) {
    const rows = await allRows(
      source,
      `SELECT rollout_id, list(feedback ORDER BY sequence_id, time, span_id) AS texts FROM rewards
       WHERE rollout_id IN (${ids.join(', ')}) AND is_primary AND feedback IS NOT NULL GROUP BY rollout_id`,
    );
    for (const row of rows) feedback.set(String(row.rollout_id), (row.texts as string[]).map(String));
  }
  return evaluations.map((e) =>
    e.rollouts.map((rollout, i) => ({
      status: rollout.status,
      reward: e.rewards[i],
      task: rollout.input,
      calls: calls.get(rollout.rollout_id) ?? [],
      feedback: feedback.get(rollout.rollout_id) ?? [],
    })),
  );
}
