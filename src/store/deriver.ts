/**
 * One round of the deriver (src/sql/derived.ts says what it derives and why): the stored spans
 * after the watermark become rows of the derived tables, and the attempts they touch are
 * credited again (their calls' default triplet answer, src/sql/credited-calls.ts) and written
 * together at the end of derived_calls. The round reads the round's spans and the touched
 * attempts' rows only, so its cost follows the round, not the store.
 */
import type { DuckDBConnection } from '@duckdb/node-api';
import { creditedCallsSql, groupOf } from '../sql/credited-calls.js';
import {
  agentsFrom,
  callsFrom,
  CREDIT_COLUMNS,
  LOG_EVENTS_AFTER_SQL,
  readable,
  rewardsFrom,
  WATERMARK,
} from '../sql/derived.js';
import { llmCallsOf } from '../sql/views.js';

/** The relations a round credits from: the touched attempts' calls, rewards and agent spans. */
const ROUND_SOURCES = {
  calls: `(${llmCallsOf('round_calls', false)})`,
  rewards: `(SELECT * FROM derived_rewards WHERE ${groupOf('derived_rewards')} IN (SELECT group_id FROM round_groups))`,
  agents: '(SELECT * FROM derived_agents WHERE trace_id IN (SELECT trace_id FROM round_calls))',
  withCall: false,
};
const ROUND_CREDITS = creditedCallsSql({}, 's.trace_id, s.span_id, s.agent_name, s.reward', ROUND_SOURCES);

/**
 * Derives the stored spans after the watermark, at most `maxSpans` of them, in one transaction on
 * `connection` (not the writer's: ingest goes on meanwhile). Returns how many spans it covered.
 */
export async function deriveSpans(connection: DuckDBConnection, maxSpans: number): Promise<number> {
  await connection.run('BEGIN TRANSACTION');
  try {
    const reader = await connection.runAndReadAll(
      `SELECT ${WATERMARK} AS done, (SELECT coalesce(max(commit_seq), -1) FROM spans) AS last`,
    );
    const [done, last] = reader.getRows()[0].map(Number);
    // Spans are appended in commit_seq order, so one past the watermark is a span not derived yet.
    const through = Math.min(last, done + maxSpans);
    if (through <= done) {
      await connection.run('ROLLBACK');
      return 0;
    }
    const skipped = await skipUnreadable(connection, `commit_seq > ${done} AND commit_seq <= ${through}`);
    const spans = `(SELECT * FROM spans WHERE commit_seq > ${done} AND commit_seq <= ${through}${skipped ? ' AND commit_seq NOT IN (SELECT row FROM round_skipped)' : ''})`;
    const touched = '(SELECT group_id FROM round_groups)';
    await connection.run(`CREATE OR REPLACE TEMP TABLE round_calls AS SELECT *, ${groupOf('c')} AS group_id FROM (${callsFrom(spans)}) c;
      INSERT INTO derived_rewards ${rewardsFrom(spans)};
      INSERT INTO derived_agents ${agentsFrom(spans)};
      -- The attempts whose calls may be credited otherwise now: those of the round's spans, those
      -- with calls in the round's traces (a parent or agent span that came late), and those with
      -- a call that one of the round's describes or is described by, by response id (agl's own
      -- call and another dialect's, llm_calls' rule). Only across that line: one id on many calls
      -- of a dialect (an app's constant id) would otherwise bring every such attempt into each
      -- round, and the round's cost would follow the store.
      CREATE OR REPLACE TEMP TABLE round_groups AS
        SELECT DISTINCT ${groupOf('s')} AS group_id FROM ${spans} s
        UNION SELECT group_id FROM derived_calls WHERE trace_id IN (SELECT trace_id FROM ${spans})
          OR (dialect > 1 AND response_id IN (SELECT response_id FROM round_calls WHERE dialect <= 1))
          OR (dialect <= 1 AND response_id IN (SELECT response_id FROM round_calls WHERE dialect > 1));
      -- Their calls join the round's and leave their place: they are written again after all
      -- others, together and in call order, so the rows of derived_calls stay grouped by attempt.
      INSERT INTO round_calls BY NAME SELECT * EXCLUDE (${CREDIT_COLUMNS}) FROM derived_calls WHERE group_id IN ${touched};
      DELETE FROM derived_calls WHERE group_id IN ${touched};
      CREATE OR REPLACE TEMP TABLE round_credits AS ${ROUND_CREDITS};
      INSERT INTO derived_calls BY NAME SELECT c.*, m.agent_name, m.reward, m.span_id IS NOT NULL AS in_triplets
        FROM round_calls c LEFT JOIN round_credits m USING (trace_id, span_id)
        ORDER BY c.group_id, c.sequence_id NULLS LAST, c.start_time, c.span_id;
      UPDATE agl_meta SET value = '${through}' WHERE key = 'derived_through';
      ${LOG_EVENTS_AFTER_SQL};
      DROP TABLE round_calls; DROP TABLE round_groups; DROP TABLE round_credits;${skipped ? ' DROP TABLE round_skipped;' : ''}`);
    await connection.run('COMMIT');
    if (skipped)
      console.error(`agl: derived ${through - done} span(s) but ${skipped}, whose attributes are not readable JSON`);
    return through - done;
  } catch (error) {
    // The round's own error is what matters (thrown on); a failed statement may have ended the transaction.
    await connection.run('ROLLBACK').catch(() => {});
    throw error;
  }
}

/**
 * Records the round's spans whose attributes DuckDB cannot parse in derived_skipped (and in the
 * temp table round_skipped, to leave them out of the round): one such span used to fail every
 * round, so that nothing after it was derived. Returns them for the log, as "N (ids...)", or
 * null when there are none.
 */
async function skipUnreadable(connection: DuckDBConnection, round: string): Promise<string | null> {
  const reader = await connection.runAndReadAll(`CREATE OR REPLACE TEMP TABLE round_skipped AS
      SELECT commit_seq AS row, rollout_id, trace_id, span_id FROM spans WHERE ${round} AND NOT ${readable()};
    INSERT INTO derived_skipped SELECT rollout_id, trace_id, span_id FROM round_skipped;
    SELECT count(*)::INTEGER, list(span_id ORDER BY row)[1:5] FROM round_skipped;`);
  const [count, first] = reader.getRows()[0] as [number, { items: string[] }];
  if (count === 0) {
    await connection.run('DROP TABLE round_skipped');
    return null;
  }
  return `skipped ${count} (${first.items.join(', ')}${count > 5 ? ', ...' : ''})`;
}
