/**
 * TraceToTriplet: one (prompt, response, reward) triplet per LLM call of a rollout attempt, in
 * call order (which calls, their agent and their reward: sql/credited-calls.ts), each
 * attempt's triplets together. Attempts come in no fixed order.
 */
import { collect, type Adapter } from './adapter.js';
import { allRows, type QuerySource } from './source.js';
import {
  checkCallSelection,
  creditedCallsSql,
  type CallSelection,
  type Credit,
  type RewardMatch,
} from '../sql/credited-calls.js';
import { CREDITED_CALLS_READY_SQL } from '../sql/derived.js';

export type { Credit, RewardMatch };
export type TripletOptions = CallSelection;

/** A triplet as tripletSelect's columns give it (a type, not an interface, so that a row can be one). */
export type Triplet = {
  prompt: { messages: unknown; token_ids: number[] | null };
  response: { message: unknown; token_ids: number[] | null; logprobs: number[] | null };
  reward: number | null;
  metadata: {
    rollout_id: string | null;
    attempt_id: string | null;
    trace_id: string;
    span_id: string;
    sequence_id: number | null;
    agent_name: string | null;
    response_id: string | null;
    model: string | null;
  };
};

/**
 * The triplet columns: prompt, response, reward, metadata (structs, so Parquet keeps their
 * types), over `c` (the call's llm_calls row) and `s` (its group, agent and reward).
 */
const tripletSelect = (
  c: string,
  s: string,
) => `{'messages': ${c}.input_messages, 'token_ids': ${c}.prompt_token_ids} AS prompt,
  {'message': ${c}.output_messages->0, 'token_ids': ${c}.response_token_ids, 'logprobs': ${c}.response_logprobs} AS response,
  ${s}.reward,
  {'rollout_id': ${s}.rollout_id, 'attempt_id': ${s}.attempt_id, 'trace_id': ${s}.trace_id, 'span_id': ${s}.span_id, 'sequence_id': ${s}.sequence_id,
   'agent_name': ${s}.agent_name, 'response_id': ${s}.response_id, 'model': ${c}.model} AS metadata`;

/** The query of the triplets that `options` select, computed from the spans. */
export function tripletsSql(options: TripletOptions = {}): string {
  return creditedCallsSql(options, tripletSelect('c', 's'));
}

/** Whether `options` are the defaults, whose answer the store's deriver keeps per call. */
const isDefault = (options: TripletOptions) =>
  options.where === undefined &&
  options.spanMatch === undefined &&
  options.agentMatch === undefined &&
  options.minReward === undefined &&
  options.rolloutMode === undefined &&
  options.attempts === undefined &&
  !options.repairFlat &&
  (options.rewardMatch ?? 'first_occurrence') === 'first_occurrence' &&
  (options.credit ?? 'step') === 'step';

/**
 * The query of the triplets that `options` select. With the default options and every span
 * derived, it is a plain scan of the calls as the deriver keeps them (grouped by attempt, each
 * with its agent and reward): an export then costs little more than writing the file.
 */
export async function tripletsQuery(source: QuerySource, options: TripletOptions = {}): Promise<string> {
  checkCallSelection(options);
  if (await derivedSelection(source, options))
    return `SELECT ${tripletSelect('c', 'c')} FROM derived_calls c WHERE c.in_triplets`;
  return tripletsSql(options);
}

/**
 * Whether derived_calls holds the calls that `options` select, credited (`WHERE in_triplets`,
 * each with its group_id and reward): the default options, once every span is derived.
 */
export async function derivedSelection(source: QuerySource, options: CallSelection): Promise<boolean> {
  if (!isDefault(options)) return false;
  const [{ ready }] = await allRows(source, CREDITED_CALLS_READY_SQL);
  return ready === true;
}

/** TraceToTriplet as an adapter: SQL gives the triplets whole, so an export is DuckDB's to write. */
export const TRIPLETS_ADAPTER: Adapter<TripletOptions, Triplet, Record<string, never>> = {
  async read(source, options = {}) {
    const sql = await tripletsQuery(source, options);
    async function* batches() {
      for await (const batch of source.stream(sql)) yield batch as Triplet[];
    }
    return { sql, batches: batches(), stats: {} };
  },
  report: () => ({ skipped: [], notes: [] }),
};

/** The triplets of every attempt that `options` select, batch by batch. */
export async function* streamTriplets(source: QuerySource, options: TripletOptions = {}): AsyncGenerator<Triplet[]> {
  yield* (await TRIPLETS_ADAPTER.read(source, options)).batches;
}

/** The triplets of every attempt that `options` select, attempt by attempt. */
export async function traceToTriplets(source: QuerySource, options: TripletOptions = {}): Promise<Triplet[]> {
  return collect((await TRIPLETS_ADAPTER.read(source, options)).batches);
}
