import type { LightningStore } from '../../api/lightning-store.js';
import type { RolloutRequest } from '../../api/types.js';
import { waitUntilFinished } from '../algorithm.js';
import type { StepRollout } from './batch.js';
import type { ModelVersion } from './models.js';

/**
 * A step's groups of rollouts: `groupSize` rollouts of one task, all with one model version (the
 * resources version they are enqueued with), run by the Trainer's runners through the queue.
 */

/** One group to run: its id (verl's uid) and its task. */
export interface Group<T> {
  readonly groupId: string;
  readonly task: number;
  readonly input: T;
}

/** The metadata key of a GRPO rollout that names its run. */
export const RUN_METADATA = 'agl.grpo.run';

/** The metadata keys of a GRPO rollout (SQL: `metadata->>'agl.grpo.step'`). */
const ROLLOUT_METADATA = {
  run: RUN_METADATA,
  step: 'agl.grpo.step',
  group: 'agl.grpo.group',
  task: 'agl.grpo.task',
  sample: 'agl.grpo.sample',
  modelVersion: 'agl.grpo.model_version',
} as const;

interface GroupRun {
  readonly runId: string;
  readonly step: number;
  readonly groupSize: number;
  readonly model: ModelVersion;
  readonly timeoutSeconds?: number;
}

/**
 * Enqueues every group's rollouts and waits until all finished (or `signal` stops the wait):
 * the finished ones, each with its latest attempt, in the order of the groups.
 */
export async function runGroups<T>(
  store: LightningStore,
  groups: readonly Group<T>[],
  run: GroupRun,
  signal: AbortSignal,
): Promise<StepRollout[]> {
  const config = run.timeoutSeconds === undefined ? undefined : { timeout_seconds: run.timeoutSeconds };
  const requests: RolloutRequest[] = groups.flatMap((group) =>
    Array.from({ length: run.groupSize }, (_, sample) => ({
      input: group.input,
      mode: 'train' as const,
      resources_id: run.model.resourcesId,
      config,
      metadata: {
        [ROLLOUT_METADATA.run]: run.runId,
        [ROLLOUT_METADATA.step]: run.step,
        [ROLLOUT_METADATA.group]: group.groupId,
        [ROLLOUT_METADATA.task]: group.task,
        [ROLLOUT_METADATA.sample]: sample,
        [ROLLOUT_METADATA.modelVersion]: run.model.version,
      },
    })),
  );
  if (requests.length === 0) return [];
  const enqueued = await store.enqueueManyRollouts(requests);
  const finished = await waitUntilFinished(
    store,
    enqueued.map((r) => r.rollout_id),
    signal,
  );
  const rollouts: StepRollout[] = [];
  for (const [i, { rollout_id: rolloutId }] of enqueued.entries()) {
    const rollout = finished.get(rolloutId);
    if (!rollout) continue;
    const attempt = await store.getLatestAttempt(rolloutId);
    rollouts.push({
      rolloutId,
      attemptId: attempt?.attempt_id ?? null,
      status: rollout.status,
      groupId: groups[Math.floor(i / run.groupSize)].groupId,
      modelVersion: run.model.version,
      versionIndex: run.model.index,
    });
  }
  return rollouts;
}
