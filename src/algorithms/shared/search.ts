import type { QuerySource } from '../../adapters/source.js';
import type { NamedResources } from '../../api/types.js';
import type { AlgorithmContext } from '../algorithm.js';
import { AlgorithmRun } from './algorithm-run.js';
import { ChatError, type ChatMessage, ChatModel } from './chat-model.js';
import type { CostClock, SearchCost } from './cost-clock.js';

/**
 * What the prompt searches (APO, GEPA) share: their settings, opening and closing their run, how
 * a search stops, its budgets and its model calls (what a round costs: cost-clock.ts). Each
 * search keeps its own steps, records and tokens.
 */

/** What a search takes besides its options (which a config file can hold too). */
export interface SearchExtras {
  /** The resources to start from, its prompt_template resources among them; default: the store's latest. */
  readonly resources?: NamedResources;
  /** Where progress lines go (default: stderr). */
  readonly log?: (line: string) => void;
}

/** What a search's run-time reads: its checked options, its models' endpoint filled in, and its extras. */
export type SearchSettings<S> = S & {
  readonly baseURL: string;
  readonly resources?: NamedResources;
  readonly log: (line: string) => void;
};

/** The options among `given` checked by `parse`, the extras beside them. */
export function searchSettings<S>(
  parse: (input: unknown) => S & { baseURL: string },
  given: SearchExtras,
): SearchSettings<S> {
  const { resources, log, ...options } = given;
  return { ...parse(options), resources, log: log ?? ((line) => console.error(line)) };
}

/** The context with the SQL source a search reads its runs' transcripts through; a TypeError without one. */
export function withSource<T>(
  context: AlgorithmContext<T>,
  name: string,
): AlgorithmContext<T> & { source: QuerySource } {
  const source = context.source;
  if (!source)
    throw new TypeError(
      `${name} reads rollout transcripts with SQL: run it with the Trainer (or give the context a \`source\`)`,
    );
  return { ...context, source };
}

/** The id of the run to resume: the one named, with `resume` the store's latest of the algorithm, else null. */
export async function runToResume(
  settings: { readonly resume: boolean; readonly resumeRun?: string },
  source: QuerySource,
  name: string,
): Promise<string | null> {
  const runId = settings.resumeRun ?? (settings.resume ? await AlgorithmRun.latest(source, name.toLowerCase()) : null);
  if (settings.resume && !runId) throw new TypeError(`there is no ${name} run in the store to resume`);
  return runId;
}

/** How a search ended: all its rounds ran, a budget was spent, or it was asked to stop. */
export type StopKind = 'completed' | 'budget' | 'interrupted';

/** A step stops the search for one of these; the round in flight is then not completed. */
export class Stop extends Error {
  constructor(
    readonly kind: Exclude<StopKind, 'completed'>,
    reason: string,
  ) {
    super(reason);
  }
}

/** How a search ended, as a kind and in words. */
export interface Ending<K extends string> {
  readonly stopped: K;
  readonly stopReason: string;
}

/**
 * Runs a search's steps to their ending. A Stop they throw ends the search, and so does any
 * error after a stop request (the store may be going away under the search: a second Ctrl-C);
 * any other error fails the run and is thrown.
 */
export async function untilStopped<K extends string>(
  steps: () => Promise<Ending<K>>,
  run: AlgorithmRun,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<Ending<K | Stop['kind']>> {
  try {
    return await steps();
  } catch (error) {
    const stop =
      error instanceof Stop
        ? error
        : signal.aborted
          ? new Stop('interrupted', `stopped by a signal (${(error as Error).message})`)
          : null;
    if (!stop) {
      await run.end('failed').catch(() => {});
      throw error;
    }
    log(`stopping: ${stop.message}`);
    return { stopped: stop.kind, stopReason: stop.message };
  }
}

/** Ends a run stopped before its seed was scored: there is nothing to give, so `message` is thrown. */
export async function endUnscored(run: AlgorithmRun, stopped: string, message: string): Promise<never> {
  await run.end(stopped === 'interrupted' ? 'cancelled' : 'failed').catch(() => {});
  throw new Error(message);
}

/**
 * Closes a run after `publish` (the best as the latest resources, and its record): it succeeded,
 * or was cancelled when asked to stop. After a stop request the store may be gone: what could
 * not be published is then told to `unpublished`, not thrown. Answers whether it was published.
 */
export async function publishBest(
  run: AlgorithmRun,
  stopped: string,
  publish: () => Promise<void>,
  unpublished: (reason: string) => void,
): Promise<boolean> {
  try {
    await publish();
    await run.end(stopped === 'interrupted' ? 'cancelled' : 'succeeded');
    return true;
  } catch (error) {
    if (stopped !== 'interrupted') throw error;
    unpublished((error as Error).message);
    return false;
  }
}

/** A stop request ends the search between steps; `kept` is what it keeps ("the best prompt"). */
export function stopIfAsked(signal: AbortSignal, kept: string): void {
  if (signal.aborted) throw new Stop('interrupted', `stopped by a signal (Ctrl-C): ${kept} so far is kept`);
}

/** Stops the search before `count` more rollouts would pass `maxRollouts`. */
export function checkRolloutBudget(maxRollouts: number | undefined, spent: number, count: number): void {
  if (maxRollouts !== undefined && spent + count > maxRollouts)
    throw new Stop(
      'budget',
      `the rollout budget (${maxRollouts}) does not cover the next ${count} rollouts (${spent} spent)`,
    );
}

/** Why the token budget allows no more model calls; null while it does. */
export function tokensSpent(maxTokens: number | undefined, tokens: number): string | null {
  return maxTokens !== undefined && tokens >= maxTokens ? `the token budget (${maxTokens}) is spent` : null;
}

/** The number of the next candidate version after these (v0, v1 ...): 0 for none. */
export const nextVersion = (versions: Iterable<string>): number =>
  Math.max(0, ...[...versions].map((v) => Number(v.slice(1)) + 1));

/** A search's settings as its run records them: without `log`, the resources (recorded apart) and secrets. */
export const recordedOptions = (settings: object, secrets: readonly string[]): Record<string, unknown> =>
  Object.fromEntries(Object.entries(settings).filter(([key]) => !['log', 'resources', ...secrets].includes(key)));

/** A model's answer and the tokens it took, or why there is none. */
export type ModelAnswer = { text: string; tokens: number } | { skipped: string };

/** Why a search's model call may not start: a stop request, or the token budget is spent; null when it may. */
export function callRefused(signal: AbortSignal, maxTokens: number | undefined, tokens: number): string | null {
  return signal.aborted ? 'stopping' : tokensSpent(maxTokens, tokens);
}

/**
 * One call of a search's model, timed on `clock`. A call that fails after its retries skips its
 * step; it does not end the search.
 */
export async function askModel(
  model: ChatModel,
  role: string,
  messages: readonly ChatMessage[],
  options: { temperature: number; seed: number; signal: AbortSignal },
  clock: CostClock<SearchCost>,
): Promise<ModelAnswer> {
  try {
    const answer = await clock.timed(() => model.complete(messages, options));
    return { text: answer.content, tokens: answer.usage.inputTokens + answer.usage.outputTokens };
  } catch (error) {
    if (error instanceof ChatError) return { skipped: `the ${role} failed: ${error.message}` };
    throw error;
  }
}

/** The endpoint, retries and timeout of a search's models, from its options. */
export interface ModelSettings {
  readonly modelApi: 'openai' | 'anthropic';
  readonly baseURL: string;
  readonly apiKey?: string;
  readonly retries: number;
  readonly retryBackoffSeconds: number;
  readonly requestTimeoutSeconds: number;
}

/** One of a search's models; `onRetry` hears of each failed try that will be retried. */
export function searchModel(settings: ModelSettings, model: string, onRetry: (line: string) => void): ChatModel {
  return new ChatModel(
    { api: settings.modelApi, baseURL: settings.baseURL, apiKey: settings.apiKey, model },
    {
      retries: settings.retries,
      backoffSeconds: settings.retryBackoffSeconds,
      timeoutSeconds: settings.requestTimeoutSeconds,
    },
    onRetry,
  );
}
