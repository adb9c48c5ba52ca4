/**
 * TraceToTrajectory: token-level rows for an RL trainer (verl and the like), per attempt.
 * - `transition`: one row per LLM call.
 * - `trajectory`: consecutive calls merged while the next prompt starts with the previous
 *   prompt and response; the tokens inserted in between (tool output, chat template) join the
 *   response masked out (mask 0, logprob 0); a prompt that does not continue starts a new row.
 * A row's reward is the credited reward of its last call that has one; with `discounted`
 * credit, the return from its first call.
 * Calls without token ids are never turned into empty rows: they are counted, with their
 * rollouts, in the statistics (and end a merge). Rows over the length limits are truncated or
 * dropped, and counted too.
 */
import type { QuerySource } from './source.js';
import { creditedCallsSql } from '../store/credited-calls.js';
import type { TripletOptions } from './triplets.js';

export interface TrajectoryOptions extends TripletOptions {
  readonly mode?: 'transition' | 'trajectory';
  readonly maxPromptLength?: number;
  readonly maxResponseLength?: number;
  /** What happens to a row over a limit (default truncate: the prompt keeps its end, the response its start). */
  readonly overlong?: 'truncate' | 'drop';
}

export interface TrajectoryRow {
  rollout_id: string | null;
  attempt_id: string | null;
  group_key: string;
  prompt_ids: number[];
  response_ids: number[];
  response_mask: number[];
  response_logprobs: number[];
  reward: number | null;
  /** How many LLM calls the row holds. */
  calls: number;
}

export interface TrajectoryStats {
  calls: number;
  rows: number;
  truncated: number;
  dropped: number;
  /** Calls without prompt or response token ids, and the rollouts they came from. */
  missingTokenIds: number;
  missingTokenIdRollouts: string[];
}

const startsWith = (ids: number[], prefix: number[]) =>
  prefix.length <= ids.length && prefix.every((id, i) => ids[i] === id);
const tokenIds = (value: unknown) => (Array.isArray(value) && value.length > 0 ? value.map(Number) : null);

/** One selected call (CALL_SELECT), in call order, with its credited reward (creditedCallsSql). */
type Call = {
  group_id: string;
  group_key: unknown;
  rollout_id: string | null;
  attempt_id: string | null;
  trace_id: string;
  prompt_token_ids: unknown;
  response_token_ids: unknown;
  response_logprobs: unknown;
  reward: number | null;
};

const CALL_SELECT = `s.group_id, s.group_key, s.rollout_id, s.attempt_id, s.trace_id, c.prompt_token_ids, c.response_token_ids, c.response_logprobs, s.reward`;

function newRow(call: Call, prompt: number[], response: number[]): TrajectoryRow {
  const logprobs = Array.isArray(call.response_logprobs) ? call.response_logprobs.map(Number) : [];
  return {
    rollout_id: call.rollout_id ?? null,
    attempt_id: call.attempt_id ?? null,
    group_key: String(call.group_key),
    prompt_ids: prompt,
    response_ids: [...response],
    response_mask: response.map(() => 1),
    response_logprobs: response.map((_, i) => logprobs[i] ?? 0),
    reward: call.reward,
    calls: 1,
  };
}

function checkOptions(options: TrajectoryOptions): void {
  if (options.mode !== undefined && options.mode !== 'transition' && options.mode !== 'trajectory')
    throw new TypeError(`mode must be transition or trajectory, not "${options.mode}"`);
  if (options.overlong !== undefined && options.overlong !== 'truncate' && options.overlong !== 'drop')
    throw new TypeError(`overlong must be truncate or drop, not "${options.overlong}"`);
  for (const key of ['maxPromptLength', 'maxResponseLength'] as const) {
    const value = options[key];
    if (value !== undefined && !(Number.isInteger(value) && value > 0))
      throw new TypeError(`${key} must be a whole number above 0, not ${value}`);
  }
}

/** Applies the length limits; false when the row is dropped. */
function fitLimits(row: TrajectoryRow, options: TrajectoryOptions, stats: TrajectoryStats): boolean {
  const promptOver = options.maxPromptLength !== undefined && row.prompt_ids.length > options.maxPromptLength;
  const responseOver = options.maxResponseLength !== undefined && row.response_ids.length > options.maxResponseLength;
  if (!promptOver && !responseOver) return true;
  if (options.overlong === 'drop') {
    stats.dropped++;
    return false;
  }
  if (promptOver) row.prompt_ids = row.prompt_ids.slice(-options.maxPromptLength);
  if (responseOver) {
    const n = options.maxResponseLength;
    row.response_ids = row.response_ids.slice(0, n);
    row.response_mask = row.response_mask.slice(0, n);
    row.response_logprobs = row.response_logprobs.slice(0, n);
  }
  stats.truncated++;
  return true;
}

export async function traceToTrajectories(
  source: QuerySource,
  options: TrajectoryOptions = {},
): Promise<{ rows: TrajectoryRow[]; stats: TrajectoryStats }> {
  checkOptions(options);
  const stats: TrajectoryStats = {
    calls: 0,
    rows: 0,
    truncated: 0,
    dropped: 0,
    missingTokenIds: 0,
    missingTokenIdRollouts: [],
  };
  const missingRollouts = new Set<string>();
  const rows: TrajectoryRow[] = [];
  const emit = (row: TrajectoryRow | undefined) => {
    if (row && fitLimits(row, options, stats)) rows.push(row);
  };
  const discounted = options.credit === 'discounted';
  let group: unknown;
  let open: TrajectoryRow | undefined;
  let context: number[] = []; // the open row's prompt + everything after it so far
  for await (const batch of source.stream(creditedCallsSql(options, CALL_SELECT))) {
    for (const call of batch as Call[]) {
      // the rows of CALL_SELECT
      stats.calls++;
      if (call.group_id !== group) {
        emit(open);
        open = undefined;
        group = call.group_id;
      }
      const prompt = tokenIds(call.prompt_token_ids);
      const response = tokenIds(call.response_token_ids);
      if (!prompt || !response) {
        stats.missingTokenIds++;
        missingRollouts.add(call.rollout_id ?? `trace:${call.trace_id}`);
        emit(open);
        open = undefined;
        continue;
      }
      if (options.mode === 'trajectory' && open && startsWith(prompt, context)) {
        const inserted = prompt.slice(context.length);
        const logprobs = Array.isArray(call.response_logprobs) ? call.response_logprobs.map(Number) : [];
        open.response_ids.push(...inserted, ...response);
        open.response_mask.push(...inserted.map(() => 0), ...response.map(() => 1));
        open.response_logprobs.push(...inserted.map(() => 0), ...response.map((_, i) => logprobs[i] ?? 0));
        if (!discounted && call.reward !== null) open.reward = call.reward;
        open.calls++;
        context = [...prompt, ...response];
        continue;
      }
      emit(open);
      open = newRow(call, prompt, response);
      context = [...prompt, ...response];
    }
  }
  emit(open);
  stats.rows = rows.length;
  stats.missingTokenIdRollouts = [...missingRollouts];
  return { rows, stats };
}
