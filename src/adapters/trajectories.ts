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
 * With `agentMatch`, calls of other agents are left out; in `trajectory` mode with
 * `otherAgents: 'mask'` they stay in the row as context instead, their responses masked out too
 * (a row with no trained token is left out and counted).
 */
import type { QuerySource } from './source.js';
import { creditedCallsSql } from '../store/credited-calls.js';
import { sqlRegex } from '../store/sql.js';
import type { TripletOptions } from './triplets.js';

export interface TrajectoryOptions extends TripletOptions {
  readonly mode?: 'transition' | 'trajectory';
  readonly maxPromptLength?: number;
  readonly maxResponseLength?: number;
  /** What happens to a row over a limit (default truncate: the prompt keeps its end, the response its start). */
  readonly overlong?: 'truncate' | 'drop';
  /**
   * With `agentMatch` in `trajectory` mode: `drop` (default) leaves other agents' calls out,
   * `mask` keeps them in the row as context (mask 0). Transition rows always leave them out.
   */
  readonly otherAgents?: 'drop' | 'mask';
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
  /** Rows of other agents' calls alone (otherAgents: mask), which have nothing to train: left out. */
  untrained: number;
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
  /** Whether the call's agent is trained (always, but with otherAgents: mask). */
  trained: boolean;
};

const CALL_SELECT = `s.group_id, s.group_key, s.rollout_id, s.attempt_id, s.trace_id, c.prompt_token_ids, c.response_token_ids, c.response_logprobs, s.reward`;

/** Whether other agents' calls stay as masked context. */
const masksOtherAgents = (options: TrajectoryOptions) =>
  options.mode === 'trajectory' && options.otherAgents === 'mask' && options.agentMatch !== undefined;

/** The query of the calls: with masked context, every agent's calls, each saying whether it is trained. */
function callsSql(options: TrajectoryOptions): string {
  if (!masksOtherAgents(options)) return creditedCallsSql(options, `${CALL_SELECT}, true AS trained`);
  const trained = `regexp_matches(coalesce(s.agent_name, ''), ${sqlRegex(options.agentMatch ?? '')})`;
  return creditedCallsSql({ ...options, agentMatch: undefined }, `${CALL_SELECT}, ${trained} AS trained`);
}

/** A response's mask and logprobs: those of a call not trained are 0. */
function responseParts(call: Call, response: number[]): { mask: number[]; logprobs: number[] } {
  if (!call.trained) return { mask: response.map(() => 0), logprobs: response.map(() => 0) };
  const given = Array.isArray(call.response_logprobs) ? call.response_logprobs.map(Number) : [];
  return { mask: response.map(() => 1), logprobs: response.map((_, i) => given[i] ?? 0) };
}

function newRow(call: Call, prompt: number[], response: number[]): TrajectoryRow {
  const { mask, logprobs } = responseParts(call, response);
  return {
    rollout_id: call.rollout_id ?? null,
    attempt_id: call.attempt_id ?? null,
    group_key: String(call.group_key),
    prompt_ids: prompt,
    response_ids: [...response],
    response_mask: mask,
    response_logprobs: logprobs,
    reward: call.reward,
    calls: 1,
  };
}

/** Appends a continuing call to the open row: the inserted tokens masked out, then its response. */
function mergeInto(row: TrajectoryRow, call: Call, inserted: number[], response: number[], discounted: boolean): void {
  const { mask, logprobs } = responseParts(call, response);
  row.response_ids.push(...inserted, ...response);
  row.response_mask.push(...inserted.map(() => 0), ...mask);
  row.response_logprobs.push(...inserted.map(() => 0), ...logprobs);
  if (!discounted && call.reward !== null) row.reward = call.reward;
  row.calls++;
}

function checkOptions(options: TrajectoryOptions): void {
  if (options.mode !== undefined && options.mode !== 'transition' && options.mode !== 'trajectory')
    throw new TypeError(`mode must be transition or trajectory, not "${options.mode}"`);
  if (options.overlong !== undefined && options.overlong !== 'truncate' && options.overlong !== 'drop')
    throw new TypeError(`overlong must be truncate or drop, not "${options.overlong}"`);
  if (options.otherAgents !== undefined && options.otherAgents !== 'drop' && options.otherAgents !== 'mask')
    throw new TypeError(`otherAgents must be drop or mask, not "${options.otherAgents}"`);
  for (const key of ['maxPromptLength', 'maxResponseLength'] as const) {
    const value = options[key];
    if (value !== undefined && !(Number.isInteger(value) && value > 0))
      throw new TypeError(`${key} must be a whole number above 0, not ${value}`);
  }
}

/** The length limits of rows. */
export type RowLimits = Pick<TrajectoryOptions, 'maxPromptLength' | 'maxResponseLength'>;

/** Whether a row is over a length limit. */
export const isOverlong = (row: TrajectoryRow, limits: RowLimits): boolean =>
  (limits.maxPromptLength !== undefined && row.prompt_ids.length > limits.maxPromptLength) ||
  (limits.maxResponseLength !== undefined && row.response_ids.length > limits.maxResponseLength);

/** Cuts a row to the limits: the prompt keeps its end, the response (mask, logprobs) its start. */
export function truncateRow(row: TrajectoryRow, limits: RowLimits): void {
  const { maxPromptLength: p, maxResponseLength: r } = limits;
  if (p !== undefined && row.prompt_ids.length > p) row.prompt_ids = row.prompt_ids.slice(-p);
  if (r !== undefined && row.response_ids.length > r) {
    row.response_ids = row.response_ids.slice(0, r);
    row.response_mask = row.response_mask.slice(0, r);
    row.response_logprobs = row.response_logprobs.slice(0, r);
  }
}

/** Applies the length limits; false when the row is dropped. */
function fitLimits(row: TrajectoryRow, options: TrajectoryOptions, stats: TrajectoryStats): boolean {
  if (!isOverlong(row, options)) return true;
  if (options.overlong === 'drop') {
    stats.dropped++;
    return false;
  }
  truncateRow(row, options);
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
    untrained: 0,
  };
  const missingRollouts = new Set<string>();
  const rows: TrajectoryRow[] = [];
  const emit = (row: TrajectoryRow | undefined) => {
    if (row && !row.response_mask.includes(1)) stats.untrained++;
    else if (row && fitLimits(row, options, stats)) rows.push(row);
  };
  const discounted = options.credit === 'discounted';
  let group: unknown;
  let open: TrajectoryRow | undefined;
  let context: number[] = []; // the open row's prompt + everything after it so far
  for await (const batch of source.stream(callsSql(options))) {
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
        mergeInto(open, call, prompt.slice(context.length), response, discounted);
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
