import { finalRewards } from '../../adapters/final-rewards.js';
import { llmCallsOfSpans, type SpanLlmCall } from '../../adapters/llm-spans.js';
import type { QuerySource } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { Rollout, RolloutMode, RolloutRequest, RolloutStatus } from '../../api/types.js';
import { waitUntilFinished } from '../algorithm.js';
import type { RolloutJudge } from '../judge/rollouts.js';

/** A finished rollout, with what its latest attempt recorded. */
export interface RolloutRecord {
  readonly rolloutId: string;
  readonly mode: RolloutMode | null;
  readonly metadata: Record<string, unknown> | null;
  readonly status: RolloutStatus;
  readonly reward: number | null;
  readonly calls: SpanLlmCall[];
}

/**
 * Enqueues `requests` and waits until every rollout finished or `signal` stops the wait; answers
 * the finished ones, in the order of the requests. With a `judge`, the succeeded ones that
 * brought no reward are judged first, each alone.
 */
export async function runRollouts(
  store: LightningStore,
  source: QuerySource,
  requests: RolloutRequest[],
  signal: AbortSignal,
  judge?: RolloutJudge,
): Promise<RolloutRecord[]> {
  const ids = requests.length ? (await store.enqueueManyRollouts(requests)).map((r) => r.rollout_id) : [];
  const done = await waitUntilFinished(store, ids, signal);
  if (judge) await judge.scoreLatest([...done.values()], signal);
  const rewards = await finalRewards(source, [...done.keys()], 'attempt');
  const records: RolloutRecord[] = [];
  for (const id of ids) {
    const rollout = done.get(id);
    if (rollout) records.push(await readRollout(store, rollout, rewards));
  }
  return records;
}

/**
 * The final reward and LLM calls of a rollout's latest attempt (the one its status is from), with
 * `rewards` by attempt: a rollout whose latest attempt recorded no reward has none, whatever an
 * earlier attempt recorded.
 */
async function readRollout(
  store: LightningStore,
  rollout: Rollout,
  rewards: ReadonlyMap<string, number>,
): Promise<RolloutRecord> {
  const { items } = await store.querySpans({
    rollout_id: rollout.rollout_id,
    attempt_id: 'latest',
    sort_by: 'sequence_id',
    sort_order: 'asc',
  });
  const { rollout_id: rolloutId, mode, metadata, status } = rollout;
  // Every span of this query is the latest attempt's; with no span, there is no reward either.
  const reward = items.length ? (rewards.get(items[0].attempt_id) ?? null) : null;
  return { rolloutId, mode, metadata, status, reward, calls: llmCallsOfSpans(items) };
}
