import assert from 'node:assert/strict';
import { fileRows } from './helpers.js';

/**
 * Asserts that the cost line of a report (`agl train sft|grpo`, `agl eval`) is what SQL counts in
 * the store file `db` over the run's rollouts, which `where` selects: them, their rows of
 * llm_calls and those rows' tokens. Answers the rollouts, for the test to check their number.
 */
export async function assertCostAsSql(report: string, db: string, where: string): Promise<number> {
  const [spent] = await fileRows(
    db,
    `SELECT (SELECT count(*) FROM rollouts WHERE ${where})::INTEGER AS rollouts, count(*)::INTEGER AS calls,
       sum(input_tokens + output_tokens)::INTEGER AS tokens
     FROM llm_calls WHERE rollout_id IN (SELECT rollout_id FROM rollouts WHERE ${where})`,
  );
  const { rollouts, calls, tokens } = spent as { rollouts: number; calls: number; tokens: number };
  assert.ok(calls > 0 && tokens > 0, `the run's rollouts made LLM calls: ${JSON.stringify(spent)}`);
  const line = /\ncost: (\d+) rollouts?, (\d+) LLM calls?, (\d+) tokens, [\d.]+ s\n/.exec(report);
  assert.ok(line, `a cost line in the report:\n${report}`);
  assert.deepEqual(line.slice(1).map(Number), [rollouts, calls, tokens]);
  return rollouts;
}
