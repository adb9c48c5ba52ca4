import { chatRecordOf, invalidReason, type ChatRecord, type SkippedRecord } from '../../adapters/messages.js';
import type { SpanLlmCall } from '../../adapters/llm-spans.js';
import type { TrajectoryRow } from '../../adapters/trajectories.js';
import type { RolloutStatus } from '../../api/types.js';

/**
 * Rejection sampling: which rollouts of an iteration are kept, and the training records their
 * LLM calls make, deduplicated.
 */

/** One rollout of a training task, with what its latest attempt recorded. */
export interface Sample {
  readonly rolloutId: string;
  /** The task's index in the training set: samples of one task compete with each other. */
  readonly task: number;
  readonly status: RolloutStatus;
  readonly reward: number | null;
  readonly calls: readonly SpanLlmCall[];
}

interface SelectionRule {
  readonly samplesPerTask: number;
  readonly topFraction: number;
  readonly threshold?: number;
}

/** How many of a task's samples its top fraction keeps: rounded up, at least one. */
const keptPerTask = (rule: SelectionRule) => Math.max(1, Math.ceil(rule.topFraction * rule.samplesPerTask - 1e-9));

/**
 * The samples kept, in the order given: per task, its best `keptPerTask` by reward (ties: the
 * earlier sample), of those that succeeded with a reward at least the threshold.
 */
export function selectSamples(samples: readonly Sample[], rule: SelectionRule): Sample[] {
  const byTask = new Map<number, { sample: Sample; reward: number; order: number }[]>();
  samples.forEach((sample, order) => {
    const { reward } = sample;
    if (sample.status !== 'succeeded' || reward === null || (rule.threshold !== undefined && reward < rule.threshold))
      return;
    byTask.set(sample.task, [...(byTask.get(sample.task) ?? []), { sample, reward, order }]);
  });
  const kept = new Set<Sample>();
  for (const group of byTask.values()) {
    const ranked = group.sort((a, b) => b.reward - a.reward || a.order - b.order);
    for (const { sample } of ranked.slice(0, keptPerTask(rule))) kept.add(sample);
  }
  return samples.filter((s) => kept.has(s));
}

export interface Records<R> {
  readonly records: R[];
  /** Records left out because an identical one came before. */
  readonly duplicates: number;
  /** Calls that made no record, with the reason. */
  readonly skipped: SkippedRecord[];
}

/** Records made from each call of each sample, the first of identical ones kept. */
function dedupedRecords<R>(
  samples: readonly Sample[],
  recordOf: (call: SpanLlmCall, sample: Sample) => R | string,
  keyOf: (record: R) => string,
): Records<R> {
  const records: R[] = [];
  const skipped: SkippedRecord[] = [];
  const seen = new Set<string>();
  let duplicates = 0;
  for (const sample of samples) {
    for (const call of sample.calls) {
      const record = recordOf(call, sample);
      if (typeof record === 'string') {
        skipped.push({ rollout_id: call.rollout_id, span_id: call.span_id, reason: record });
        continue;
      }
      const key = keyOf(record);
      if (seen.has(key)) duplicates++;
      else {
        seen.add(key);
        records.push(record);
      }
    }
  }
  return { records, duplicates, skipped };
}

/** OpenAI chat fine-tuning records (as `agl export messages` writes them), one per call. */
export function chatRecords(samples: readonly Sample[]): Records<ChatRecord> {
  return dedupedRecords(
    samples,
    (call) => {
      const record = chatRecordOf(call.inputMessages, call.outputMessages, call.tools);
      return invalidReason(record) ?? (record as ChatRecord); // what invalidReason found valid
    },
    (record) => JSON.stringify(record),
  );
}

/**
 * Token-level rows (as `agl export trajectories` writes them, one per call), for a trainer that
 * wants the exact tokens the model saw and sampled; grouped by task.
 */
export function tokenRecords(samples: readonly Sample[]): Records<TrajectoryRow> {
  return dedupedRecords(
    samples,
    (call, sample) => {
      const prompt = call.promptTokenIds;
      const response = call.responseTokenIds;
      if (!prompt?.length || !response?.length)
        return 'no token ids: the model server returned none (vLLM with return_token_ids)';
      return {
        rollout_id: call.rollout_id,
        attempt_id: call.attempt_id,
        group_key: `task-${sample.task}`,
        prompt_ids: prompt,
        response_ids: response,
        response_mask: response.map(() => 1),
        response_logprobs: response.map((_, i) => call.responseLogprobs?.[i] ?? 0),
        reward: sample.reward,
        calls: 1,
      };
    },
    (row) => JSON.stringify([row.prompt_ids, row.response_ids]),
  );
}
