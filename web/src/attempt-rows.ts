/** The rows of an attempt's SQL queries (queries.ts: attemptCallsSql, attemptRewardsSql). */

/** A row of attemptCallsSql. */
export interface CallRow {
  readonly span_id: string;
  readonly trace_id: string;
  readonly parent_id: string | null;
  readonly sequence_id: number | null;
  readonly start_time: number | null;
  readonly end_time: number | null;
  readonly name: string;
  readonly provider: string | null;
  readonly model: string | null;
  readonly input_messages: unknown;
  readonly output_messages: unknown;
  readonly tools: unknown;
  readonly input_tokens: number | null;
  readonly output_tokens: number | null;
  readonly finish_reason: string | null;
  readonly response_id: string | null;
  readonly prompt_token_count: number | null;
  readonly response_token_count: number | null;
  readonly reward: number | null;
  readonly reward_span_id: string | null;
}

/** A row of attemptRewardsSql. */
export interface RewardRow {
  readonly span_id: string;
  readonly name: string;
  readonly value: number | null;
  readonly is_primary: boolean;
  /** Epoch seconds. */
  readonly time: number;
  /** Who gave it: agent, feedback or judge. */
  readonly source: string;
  /** The agent's explanation, the feedback's comment or the judge's reason. */
  readonly feedback: string | null;
}
