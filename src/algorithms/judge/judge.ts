import { ChatError, ChatModel, type ChatMessage } from '../shared/chat-model.js';

/**
 * LLM judges, for agent tasks that have no reward function: `judge` scores one transcript from 0
 * to 1 against a rubric, with a reason; `judgeGroup` scores the transcripts of one task relative
 * to each other (RULER-style: the better ones higher, equally good ones may tie), the shape
 * GRPO's groups need. The judge is any OpenAI-compatible chat model (shared/chat-model.ts: its
 * calls go through agl's own HTTP client, so the fetch capture never records them as the
 * agent's). An answer that is not the JSON asked for is asked again; after the last try, or at
 * a call that failed (ChatModel's own retries spent, or a 401 that no retry changes), the judge
 * throws a JudgeError, so that a caller leaves the transcript unscored rather than 0.
 */

/** One message of a transcript: any role (tool results too), its content as text. */
export interface TranscriptMessage {
  readonly role: string;
  readonly content: string;
}

export type Transcript = readonly TranscriptMessage[];

export interface JudgeSettings {
  /** What a good transcript does: the criteria the judge scores by. */
  readonly rubric: string;
  readonly model: string;
  /** OpenAI-compatible base URL, with its /v1. */
  readonly endpoint: string;
  readonly apiKey?: string;
  /** Tries after the first, for a call that may pass (no answer, 429, 5xx) or an answer that is not the JSON asked for (default 2). */
  readonly retries?: number;
  /** The first wait before retrying a failed call; it doubles (default 1). */
  readonly retryBackoffSeconds?: number;
  /** How long one call may take (default 120). */
  readonly timeoutSeconds?: number;
  /** Ends the waits between tries. */
  readonly signal?: AbortSignal;
}

export interface Verdict {
  /** From 0 (fails the rubric) to 1 (meets it fully). */
  readonly score: number;
  readonly reason: string;
}

/** What a judge call cost and said, for the caller to record (the prompt and the last answer). */
export interface JudgeCall {
  readonly prompt: readonly ChatMessage[];
  readonly answer: string;
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly tries: number;
}

/** The judge failed for good: every try failed or answered nonsense. `call` has what the tries cost. */
export class JudgeError extends Error {
  constructor(
    message: string,
    readonly call: JudgeCall,
  ) {
    super(message);
    this.name = 'JudgeError';
  }
}

const SINGLE_INSTRUCTIONS = `You are a judge of an AI agent's work. Score the transcript below against the rubric, from 0 (fails it) to 1 (meets it fully).
Answer with JSON only, no other text: {"score": <number from 0 to 1>, "reason": "<one or two sentences>"}`;

const GROUP_INSTRUCTIONS = `You are a judge of an AI agent's work. The transcripts below are attempts at the same task. Score each against the rubric and relative to the others, from 0 to 1: a better attempt scores higher; equally good attempts may share a score.
Answer with JSON only, no other text: {"scores": [{"transcript": <its index>, "score": <number from 0 to 1>, "reason": "<one or two sentences>"}, ...]} with one entry per transcript.`;

const render = (transcript: Transcript) => transcript.map((m) => `[${m.role}] ${m.content}`).join('\n');

/** Scores one transcript against the rubric. */
export async function judge(
  settings: JudgeSettings & { readonly transcript: Transcript },
): Promise<Verdict & JudgeCall> {
  const prompt: ChatMessage[] = [
    { role: 'system', content: `${SINGLE_INSTRUCTIONS}\n\n<rubric>\n${settings.rubric}\n</rubric>` },
    { role: 'user', content: `<transcript>\n${render(settings.transcript)}\n</transcript>` },
  ];
  const { verdicts, call } = await ask(settings, prompt, (answer) => {
    const verdict = verdictOf(answer);
    return verdict ? [verdict] : undefined;
  });
  return { ...verdicts[0], ...call };
}

/** Scores the transcripts of one task relative to each other: the verdicts in the transcripts' order. */
export async function judgeGroup(
  settings: JudgeSettings & { readonly transcripts: readonly Transcript[] },
): Promise<{ verdicts: Verdict[] } & JudgeCall> {
  const { transcripts } = settings;
  if (transcripts.length === 0) throw new TypeError('judgeGroup needs at least one transcript');
  const shown = transcripts.map((t, i) => `<transcript index="${i + 1}">\n${render(t)}\n</transcript>`).join('\n');
  const prompt: ChatMessage[] = [
    { role: 'system', content: `${GROUP_INSTRUCTIONS}\n\n<rubric>\n${settings.rubric}\n</rubric>` },
    { role: 'user', content: shown },
  ];
  const { verdicts, call } = await ask(settings, prompt, (answer) => groupVerdictsOf(answer, transcripts.length));
  return { verdicts, ...call };
}

/** Asks until `read` makes sense of an answer, or the tries are spent. */
async function ask(
  settings: JudgeSettings,
  prompt: ChatMessage[],
  read: (answer: string) => Verdict[] | undefined,
): Promise<{ verdicts: Verdict[]; call: JudgeCall }> {
  const retries = settings.retries ?? 2;
  const model = new ChatModel(
    { baseURL: settings.endpoint, apiKey: settings.apiKey, model: settings.model },
    { retries, backoffSeconds: settings.retryBackoffSeconds ?? 1, timeoutSeconds: settings.timeoutSeconds ?? 120 },
  );
  const call = { prompt, answer: '', inputTokens: 0, outputTokens: 0, tries: 0 };
  for (;;) {
    let answer: Awaited<ReturnType<ChatModel['complete']>>;
    try {
      answer = await model.complete(prompt, { temperature: 0, signal: settings.signal });
    } catch (error) {
      // ChatModel retried what may pass (no answer, 429, 5xx) and gave up, or the answer was one
      // no retry changes (401, 404): asking again would only repeat it.
      call.tries += error instanceof ChatError ? error.tries : 1;
      throw new JudgeError(`judge ${settings.model} failed: ${(error as Error).message}`, call);
    }
    Object.assign(call, {
      answer: answer.content,
      inputTokens: call.inputTokens + answer.usage.inputTokens,
      outputTokens: call.outputTokens + answer.usage.outputTokens,
      tries: call.tries + answer.tries,
    });
    const verdicts = read(answer.content);
    if (verdicts) return { verdicts, call };
    if (call.tries > retries || settings.signal?.aborted) {
      const shown = JSON.stringify(answer.content.slice(0, 200));
      throw new JudgeError(`judge ${settings.model} answered no verdict: ${shown} (after ${call.tries} tries)`, call);
    }
  }
}

/** The first JSON object in a text (models often wrap it in a code fence), or undefined. */
function jsonIn(text: string): Record<string, unknown> | undefined {
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  if (start < 0 || end < start) return undefined;
  try {
    const value: unknown = JSON.parse(text.slice(start, end + 1));
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

function verdictOf(answer: string | Record<string, unknown> | undefined): Verdict | undefined {
  const value = typeof answer === 'string' ? jsonIn(answer) : answer;
  const score = value?.score;
  if (typeof score !== 'number' || !(score >= 0 && score <= 1)) return undefined;
  return { score, reason: typeof value?.reason === 'string' ? value.reason : '' };
}

/** One verdict per transcript, each index once; undefined when the answer is anything else. */
function groupVerdictsOf(answer: string, count: number): Verdict[] | undefined {
  const scores = jsonIn(answer)?.scores;
  if (!Array.isArray(scores) || scores.length !== count) return undefined;
  const verdicts: (Verdict | undefined)[] = Array.from({ length: count });
  for (const entry of scores) {
    if (typeof entry !== 'object' || entry === null) return undefined;
    const index = (entry as Record<string, unknown>).transcript;
    const verdict = verdictOf(entry as Record<string, unknown>);
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 1 || index > count) return undefined;
    if (!verdict || verdicts[index - 1]) return undefined;
    verdicts[index - 1] = verdict;
  }
  return verdicts as Verdict[];
}
