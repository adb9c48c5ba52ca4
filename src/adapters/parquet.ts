import { DuckDBInstance } from '@duckdb/node-api';
import { sqlText } from '../sql/literals.js';

/** Parquet columns per record kind: nested values stay JSON, so that every record fits one schema; token ids are lists. */
export const PARQUET_COLUMNS: Record<string, string> = {
  messages: `{messages: 'JSON', tools: 'JSON', parallel_tool_calls: 'BOOLEAN'}`,
  trajectories: `{rollout_id: 'VARCHAR', attempt_id: 'VARCHAR', group_key: 'VARCHAR', prompt_ids: 'INTEGER[]', response_ids: 'INTEGER[]',
    response_mask: 'TINYINT[]', response_logprobs: 'DOUBLE[]', reward: 'DOUBLE', calls: 'INTEGER'}`,
  // A GRPO batch (docs/training.md): the Arrow types of the HTTP hand-off, in Parquet.
  training_batch: `{batch_id: 'VARCHAR', step: 'INTEGER', group_id: 'VARCHAR', rollout_id: 'VARCHAR', attempt_id: 'VARCHAR',
    model_version: 'VARCHAR', prompt_ids: 'INTEGER[]', response_ids: 'INTEGER[]', response_mask: 'TINYINT[]',
    response_logprobs: 'FLOAT[]', reward: 'FLOAT', advantage: 'FLOAT'}`,
};

/**
 * Writes the records of a JSONL file as Parquet with `columns` (one of PARQUET_COLUMNS), through
 * an in-memory DuckDB; `metadata` becomes the file's key-value metadata.
 */
export async function jsonlToParquet(
  lines: string,
  out: string,
  columns: string,
  metadata: Record<string, string> = {},
): Promise<void> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  const entries = Object.entries(metadata);
  const kv = entries.length
    ? `, KV_METADATA {${entries.map(([k, v]) => `${sqlText(k)}: ${sqlText(v)}`).join(', ')}}`
    : '';
  try {
    await connection.run(`COPY (SELECT * FROM read_json(${sqlText(lines)}, format = 'newline_delimited', columns = ${columns}))
      TO ${sqlText(out)} (FORMAT PARQUET${kv})`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
