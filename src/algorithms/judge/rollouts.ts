import { randomBytes } from 'node:crypto';
import { finalRewards } from '../../adapters/final-rewards.js';
import { jsonValue } from '../../adapters/json-column.js';
import { allRows, type QuerySource } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import { AGL, ATTR, JUDGE } from '../../api/semconv.js';
import type { Rollout, Span } from '../../api/types.js';
import { derivedRowsOf } from '../../sql/derived.js';
import { llmCallsOf } from '../../sql/views.js';
import type { AlgorithmRun } from '../shared/algorithm-run.js';
import {
  judge,
  type JudgeCall,
  JudgeError,
  judgeGroup,
  type JudgeSettings,
  type Transcript,
  type Verdict,
} from './judge.js';

/**
 * An LLM judge over an algorithm's rollouts: the attempts that brought no reward of their own
 * are read as transcripts (their LLM calls, in order), judged (a group relative to each other,
 * or each alone), and each score written as a reward span of the attempt with source `judge` and
 * the judge's reason as feedback text, after its calls: the `rewards` view, the exports and
 * GRPO's batches read it like any reward. Each judge call is a span of the run's own rollout
 * (JUDGE in semconv.ts). A call that fails after its retries leaves its rollouts unscored.
 */

export interface JudgedAttempt {
  readonly rolloutId: string;
  readonly attemptId: string;
}

/** What one round of judging did. */
export interface JudgeTally {
  readonly scored: number;
  /** Attempts without a reward that the judge could not score (failed, nonsense, or no calls to read). */
  readonly unscored: number;
}

interface Read {
  readonly transcript: Transcript;
  readonly traceId: string;
  readonly parentId: string | null;
}

export class RolloutJudge {
  private inputTokens = 0;
  private outputTokens = 0;

  constructor(
    private readonly settings: JudgeSettings,
    private readonly store: LightningStore,
    private readonly source: QuerySource,
    private readonly run: AlgorithmRun,
    private readonly log: (line: string) => void,
  ) {}

  /** Tokens the judge spent so far (input and output), for the run's budget. */
  get tokens(): number {
    return this.inputTokens + this.outputTokens;
  }

  /** Scores the unrewarded attempts of each group relative to each other (GRPO's groups). */
  scoreGroups(groups: readonly (readonly JudgedAttempt[])[], signal?: AbortSignal): Promise<JudgeTally> {
    return this.score(groups, signal, false);
  }

  /** Scores the latest attempt of each succeeded rollout that brought no reward, each alone (SFT, APO). */
  async scoreLatest(rollouts: readonly Rollout[], signal?: AbortSignal): Promise<JudgeTally> {
    const attempts: JudgedAttempt[][] = [];
    for (const rollout of rollouts.filter((r) => r.status === 'succeeded')) {
      const attempt = await this.store.getLatestAttempt(rollout.rollout_id);
      if (attempt) attempts.push([{ rolloutId: rollout.rollout_id, attemptId: attempt.attempt_id }]);
    }
    return this.score(attempts, signal, true);
  }

  private async score(
    groups: readonly (readonly JudgedAttempt[])[],
    signal: AbortSignal | undefined,
    alone: boolean,
  ): Promise<JudgeTally> {
    const all = groups.flat();
    const rewarded = await finalRewards(
      this.source,
      all.map((a) => a.rolloutId),
      'attempt',
    );
    const unrewarded = all.filter((a) => !rewarded.has(a.attemptId));
    const reads = await readTranscripts(this.source, unrewarded);
    let scored = 0;
    await Promise.all(
      groups.map(async (group) => {
        const judged = group.filter((a) => !rewarded.has(a.attemptId) && reads.has(a.attemptId));
        if (judged.length === 0 || signal?.aborted) return;
        const verdicts = await this.call(judged, reads, alone, signal);
        if (!verdicts) return;
        for (const [i, attempt] of judged.entries())
          await this.writeReward(attempt, reads.get(attempt.attemptId) as Read, verdicts[i]);
        scored += judged.length;
      }),
    );
    return { scored, unscored: unrewarded.length - scored };
  }

  /** One judge call, recorded on the run; its verdicts, or undefined when it failed. */
  private async call(
    attempts: readonly JudgedAttempt[],
    reads: ReadonlyMap<string, Read>,
    alone: boolean,
    signal: AbortSignal | undefined,
  ): Promise<Verdict[] | undefined> {
    const transcripts = attempts.map((a) => (reads.get(a.attemptId) as Read).transcript);
    const startTime = Date.now() / 1000;
    let verdicts: Verdict[] | undefined;
    let call: JudgeCall;
    let error: string | undefined;
    try {
      if (alone) {
        const single = await judge({ ...this.settings, transcript: transcripts[0], signal });
        verdicts = [single];
        call = single;
      } else {
        const group = await judgeGroup({ ...this.settings, transcripts, signal });
        verdicts = group.verdicts;
        call = group;
      }
    } catch (failure) {
      if (!(failure instanceof JudgeError)) throw failure;
      call = failure.call;
      error = failure.message;
      this.log(`${error}; ${attempts.length} rollout(s) left unscored`);
    }
    this.inputTokens += call.inputTokens;
    this.outputTokens += call.outputTokens;
    await this.run.record(
      JUDGE.callSpan,
      {
        [JUDGE.model]: this.settings.model,
        [JUDGE.rolloutIds]: attempts.map((a) => a.rolloutId),
        [JUDGE.scores]: verdicts?.map((v) => String(v.score)),
        [JUDGE.prompt]: JSON.stringify(call.prompt),
        [JUDGE.answer]: call.answer,
        [JUDGE.inputTokens]: call.inputTokens,
        [JUDGE.outputTokens]: call.outputTokens,
        [JUDGE.tries]: call.tries,
      },
      { startTime, endTime: Date.now() / 1000, error },
    );
    return verdicts;
  }

  /** The verdict as a reward span of the attempt, a sibling of its last call, after every span it has. */
  private async writeReward(attempt: JudgedAttempt, read: Read, verdict: Verdict): Promise<void> {
    const now = Date.now() / 1000;
    const spanId = randomBytes(8).toString('hex');
    const span: Span = {
      rollout_id: attempt.rolloutId,
      attempt_id: attempt.attemptId,
      sequence_id: await this.store.getNextSpanSequenceId(attempt.rolloutId, attempt.attemptId),
      trace_id: read.traceId,
      span_id: spanId,
      parent_id: read.parentId,
      name: AGL.annotation,
      status: { status_code: 'OK', description: null },
      attributes: {
        [`${ATTR.reward}.0.name`]: 'judge',
        [`${ATTR.reward}.0.value`]: verdict.score,
        [ATTR.rewardSource]: 'judge',
        [ATTR.rewardFeedback]: verdict.reason,
      },
      events: [],
      links: [],
      start_time: now,
      end_time: now,
      context: { trace_id: read.traceId, span_id: spanId, is_remote: false, trace_state: {} },
      parent: null,
      resource: { attributes: { 'service.name': 'agl-judge' }, schema_url: '' },
    };
    await this.store.addSpan(span);
  }
}

/** Each attempt's LLM calls as one transcript (a call that continues the last one adds only what is new). */
async function readTranscripts(source: QuerySource, attempts: readonly JudgedAttempt[]): Promise<Map<string, Read>> {
  const reads = new Map<string, Read>();
  if (attempts.length === 0) return reads;
  const rows = derivedRowsOf({ attemptIds: attempts.map((a) => a.attemptId) });
  const calls = await allRows(
    source,
    `WITH judged_call_rows AS MATERIALIZED (${rows.calls})
SELECT attempt_id, trace_id, parent_id, input_messages, output_messages FROM (${llmCallsOf('judged_call_rows', false)})
ORDER BY attempt_id, sequence_id NULLS LAST, start_time, span_id`,
  );
  for (const call of calls) {
    const id = String(call.attempt_id);
    const before = reads.get(id)?.transcript ?? [];
    const input = messagesOf(call.input_messages);
    const continues = input.length >= before.length && before.every((m, i) => sameMessage(m, input[i]));
    const transcript = [
      ...before,
      ...(continues ? input.slice(before.length) : input),
      ...messagesOf(call.output_messages),
    ];
    reads.set(id, { transcript, traceId: String(call.trace_id), parentId: (call.parent_id as string | null) ?? null });
  }
  return reads;
}

const sameMessage = (a: TranscriptMessage, b: TranscriptMessage) => a.role === b.role && a.content === b.content;

type TranscriptMessage = Transcript[number];

/** A JSON column of messages as transcript messages: content that is not text (tool calls, parts) as JSON. */
function messagesOf(value: unknown): TranscriptMessage[] {
  const parsed = jsonValue(value);
  if (!Array.isArray(parsed)) return [];
  return parsed.map((message: Record<string, unknown>) => {
    const { role, content, ...rest } = typeof message === 'object' && message !== null ? message : {};
    const text = typeof content === 'string' ? content : content == null ? '' : JSON.stringify(content);
    const present = Object.entries(rest).filter(([, v]) => v !== null && v !== undefined);
    const extra = present.length ? ` ${JSON.stringify(Object.fromEntries(present))}` : '';
    return { role: String(role ?? 'unknown'), content: `${text}${extra}`.trim() };
  });
}
