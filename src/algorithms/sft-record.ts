import { randomBytes } from 'node:crypto';
import type { LightningStore } from '../api/lightning-store.js';
import { SFT } from '../api/semconv.js';
import type { AttemptedRollout, Span } from '../api/types.js';

/**
 * What an SFT run leaves in the store besides its rollouts and resources versions: the run is a
 * rollout of its own (started, never queued, so no runner takes it; its input the options), and
 * each iteration one span on it, `agl.sft.iteration`, whose attributes say what the iteration
 * selected, exported, ran and published. Only the LightningStore interface is used, so it works
 * the same against a server; the `sft_iterations` view (store/views.ts) reads the spans.
 */

/** How an iteration ended. */
export type IterationStatus = 'trained' | 'failed' | 'no_records' | 'stopped' | 'evaluated';

export interface IterationRecord {
  readonly iteration: number;
  readonly status: IterationStatus;
  /** Seconds since the epoch. */
  readonly startTime: number;
  readonly endTime: number;
  /** The resources version its rollouts ran with. */
  readonly usedResourcesId: string;
  readonly rollouts: number;
  readonly succeeded: number;
  readonly meanReward: number | null;
  readonly valMeanReward: number | null;
  readonly keptRolloutIds?: readonly string[];
  readonly dataset?: string;
  readonly format?: string;
  readonly records?: number;
  readonly duplicates?: number;
  readonly skipped?: number;
  readonly command?: string;
  readonly exitCode?: number | null;
  readonly exitSignal?: string | null;
  readonly outputTail?: string;
  readonly log?: string;
  /** The resources version it published: the trained model. */
  readonly resourcesId?: string;
  readonly model?: string;
  readonly endpoint?: string;
  readonly error?: string;
}

const hex = (bytes: number) => randomBytes(bytes).toString('hex');

/** The span attributes of a record: every field that is set, under its `agl.sft.*` key. */
function attributesOf(record: IterationRecord): Record<string, unknown> {
  const values: Record<string, unknown> = {
    [SFT.iteration]: record.iteration,
    [SFT.status]: record.status,
    [SFT.usedResourcesId]: record.usedResourcesId,
    [SFT.rollouts]: record.rollouts,
    [SFT.succeeded]: record.succeeded,
    [SFT.meanReward]: record.meanReward,
    [SFT.valMeanReward]: record.valMeanReward,
    [SFT.keptRollouts]: record.keptRolloutIds?.length,
    [SFT.keptRolloutIds]: record.keptRolloutIds,
    [SFT.dataset]: record.dataset,
    [SFT.format]: record.format,
    [SFT.records]: record.records,
    [SFT.duplicates]: record.duplicates,
    [SFT.skipped]: record.skipped,
    [SFT.command]: record.command,
    [SFT.exitCode]: record.exitCode,
    [SFT.exitSignal]: record.exitSignal,
    [SFT.outputTail]: record.outputTail,
    [SFT.log]: record.log,
    [SFT.resourcesId]: record.resourcesId,
    [SFT.model]: record.model,
    [SFT.endpoint]: record.endpoint,
    [SFT.error]: record.error,
  };
  return Object.fromEntries(Object.entries(values).filter(([, value]) => value !== undefined && value !== null));
}

export class SftRun {
  private readonly traceId = hex(16);

  private constructor(
    private readonly store: LightningStore,
    private readonly rollout: AttemptedRollout,
  ) {}

  /** Starts the run's rollout; `input` describes the run (its options). */
  static async start(store: LightningStore, input: unknown): Promise<SftRun> {
    const rollout = await store.startRollout({ input, mode: null, metadata: { 'agl.algorithm': 'sft' } });
    await store.updateAttempt(rollout.rollout_id, rollout.attempt.attempt_id, { status: 'running' });
    return new SftRun(store, rollout);
  }

  /** The run's rollout id: the `run_id` of `sft_iterations`, and `agl.sft.run` in its rollouts' metadata. */
  get id(): string {
    return this.rollout.rollout_id;
  }

  async record(record: IterationRecord): Promise<void> {
    const { rollout_id, attempt } = this.rollout;
    const spanId = hex(8);
    const span: Span = {
      rollout_id,
      attempt_id: attempt.attempt_id,
      sequence_id: await this.store.getNextSpanSequenceId(rollout_id, attempt.attempt_id),
      trace_id: this.traceId,
      span_id: spanId,
      parent_id: null,
      name: SFT.iterationSpan,
      status:
        record.error === undefined
          ? { status_code: 'OK', description: null }
          : { status_code: 'ERROR', description: record.error },
      attributes: attributesOf(record),
      events: [],
      links: [],
      start_time: record.startTime,
      end_time: record.endTime,
      context: { trace_id: this.traceId, span_id: spanId, is_remote: false, trace_state: {} },
      parent: null,
      resource: { attributes: { 'service.name': 'agl-sft' }, schema_url: '' },
    };
    await this.store.addSpan(span);
  }

  /** Ends the run's rollout: succeeded, failed (a training command failed) or cancelled (stopped). */
  async finish(status: 'succeeded' | 'failed' | 'cancelled'): Promise<void> {
    await this.store.updateAttempt(this.rollout.rollout_id, this.rollout.attempt.attempt_id, { status });
  }
}
