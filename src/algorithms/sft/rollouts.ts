import { llmCallsOfSpans, type SpanLlmCall } from '../../adapters/llm-spans.js';
import { findFinalReward } from '../../adapters/rewards.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { Rollout, RolloutMode, RolloutRequest, RolloutStatus } from '../../api/types.js';
import { waitUntilFinished } from '../algorithm.js';

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
 * the finished ones, in the order of the requests.
 */
export async function runRollouts(
  store: LightningStore,
  requests: RolloutRequest[],
  signal: AbortSignal,
): Promise<RolloutRecord[]> {
  const ids = requests.length ? (await store.enqueueManyRollouts(requests)).map((r) => r.rollout_id) : [];
  const done = await waitUntilFinished(store, ids, signal);
  const records: RolloutRecord[] = [];
  for (const id of ids) {
    const rollout = done.get(id);
    if (rollout) records.push(await readRollout(store, rollout));
  }
  return records;
}

/** The final reward and LLM calls of a rollout's latest attempt (the one its status is from). */
async function readRollout(store: LightningStore, rollout: Rollout): Promise<RolloutRecord> {
  const { items } = await store.querySpans({
    rollout_id: rollout.rollout_id,
    attempt_id: 'latest',
    sort_by: 'sequence_id',
    sort_order: 'asc',
  });
  const { rollout_id: rolloutId, mode, metadata, status } = rollout;
  return { rolloutId, mode, metadata, status, reward: findFinalReward(items), calls: llmCallsOfSpans(items) };
}
