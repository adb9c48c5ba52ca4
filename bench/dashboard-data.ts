import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { DuckDBStore } from '../src/store/store.js';

export interface DashboardData {
  readonly rollouts: number;
  /** Spans of each rollout: a root, LLM calls, tool calls and one reward span. */
  readonly spansPerRollout: number;
  /** LLM calls among them. */
  readonly callsPerRollout: number;
}

/** 2026-01-01 in epoch seconds: rollout i is enqueued i / 2 seconds after it. */
const T0 = 1_767_225_600;
const WORKERS = 32;
const RESOURCE_VERSIONS = 10;

/**
 * A store the size of a long training run, written straight into DuckDB's tables with SQL
 * (through the API it would take hours): `state_history` holds every rollout's versions
 * (queuing, running, final) and its attempts' (one, two for failed ones), as the
 * LightningStore writes them; `spans` the spans; `derived_calls` and `derived_rewards` what the
 * deriver would make of them, with the watermark after the last span, as a server that caught up
 * leaves it. Every 20th rollout failed, every 5th is a validation rollout, a few still run or queue.
 * The tables are the store's own (DuckDBStore.open makes them), filled by column name.
 */
export async function fillDashboardStore(path: string, data: DashboardData): Promise<void> {
  const store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
  await store.close();
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  try {
    for (const { table, select } of fillSql(data)) await insertByName(connection, table, select);
    await connection.run(
      `UPDATE agl_meta SET value = (SELECT max(commit_seq) FROM spans)::VARCHAR WHERE key = 'derived_through'`,
    );
    await connection.run('CHECKPOINT');
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

/**
 * Inserts the rows of `select` into `table` by column name, once they name every column of the
 * table and no other: a column the schema gains or loses fails here, named, not somewhere in the
 * server that reads the rows.
 */
async function insertByName(connection: DuckDBConnection, table: string, select: string): Promise<void> {
  const columns = await connection.runAndReadAll(
    `SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = '${table}'`,
  );
  const wanted = columns.getRows().map(([name]) => String(name));
  const given = (await connection.runAndReadAll(`SELECT * FROM (${select}) LIMIT 0`)).columnNames();
  const missing = wanted.filter((name) => !given.includes(name));
  const unknown = given.filter((name) => !wanted.includes(name));
  if (missing.length > 0 || unknown.length > 0)
    throw new Error(
      `dashboard bench data for ${table}: ${[
        missing.length > 0 ? `no value for ${missing.join(', ')}` : '',
        unknown.length > 0 ? `no column ${unknown.join(', ')}` : '',
      ]
        .filter(Boolean)
        .join('; ')}`,
    );
  await connection.run(`INSERT INTO ${table} BY NAME ${select}`);
}

function fillSql({ rollouts, spansPerRollout, callsPerRollout }: DashboardData): { table: string; select: string }[] {
  const status = `CASE WHEN i % 997 = 3 THEN 'queuing' WHEN i % 499 = 2 THEN 'running' WHEN i % 20 = 0 THEN 'failed' ELSE 'succeeded' END`;
  const rollout = `SELECT i, 'ro-' || lpad(i::VARCHAR, 8, '0') AS id, ${T0} + i / 2 AS t, ${status} AS status,
      CASE WHEN i % 5 = 0 THEN 'val' ELSE 'train' END AS mode, 'rs-' || (i * ${RESOURCE_VERSIONS} // ${rollouts}) AS rs,
      json_object('question', 'What is ' || (i % 1000) || ' + ' || (i % 77) || '?', 'answer', i % 1000 + i % 77) AS input
    FROM range(${rollouts}) r(i)`;
  // Versions: 16 per rollout, in its order; a failed rollout's second attempt takes 4-7.
  const history = `WITH r AS (${rollout}),
    steps AS (
      SELECT r.*, s.step FROM r, (VALUES ('queuing'), ('running'), ('final')) s(step)
      WHERE s.step = 'queuing' OR (r.status <> 'queuing' AND (s.step = 'running' OR r.status IN ('succeeded', 'failed')))
    ),
    attempts AS (
      SELECT r.*, a.n, s.step FROM r, range(1, 3) a(n), (VALUES ('preparing'), ('running'), ('final')) s(step)
      WHERE r.status <> 'queuing' AND (a.n = 1 OR r.status = 'failed')
        AND (s.step <> 'final' OR r.status IN ('succeeded', 'failed'))
    )
    SELECT 'rollout' AS kind, id AS key, i * 16 + CASE step WHEN 'queuing' THEN 0 WHEN 'running' THEN 1 ELSE 15 END AS version,
      json_object('rollout_id', id, 'input', input, 'start_time', t, 'end_time', CASE WHEN step = 'final' THEN t + 3 + i % 7 END,
        'mode', mode, 'resources_id', rs, 'status', CASE step WHEN 'final' THEN status ELSE step END,
        'config', json_object('timeout_seconds', NULL, 'unresponsive_seconds', NULL, 'max_attempts', 2, 'retry_condition', ['failed']),
        'metadata', json_object()) AS data
    FROM steps
    UNION ALL
    SELECT 'attempt', id || '/at-' || i || '-' || n, i * 16 + n * 4 + CASE step WHEN 'preparing' THEN 0 WHEN 'running' THEN 1 ELSE 2 END,
      json_object('rollout_id', id, 'attempt_id', 'at-' || i || '-' || n, 'sequence_id', n, 'start_time', t + n,
        'end_time', CASE WHEN step = 'final' THEN t + 3 + i % 7 END,
        'status', CASE WHEN step <> 'final' THEN step WHEN status = 'failed' THEN 'failed' ELSE 'succeeded' END,
        'worker_id', 'runner-' || (i % ${WORKERS}), 'last_heartbeat_time', t + 2, 'metadata', json_object())
    FROM attempts`;
  const extra = `SELECT 'resources' AS kind, 'rs-' || v AS key, ${rollouts} * 16 + v AS version,
      json_object('resources_id', 'rs-' || v, 'version', 1, 'create_time', ${T0} + v * ${rollouts} / ${2 * RESOURCE_VERSIONS},
        'update_time', ${T0} + v * ${rollouts} / ${2 * RESOURCE_VERSIONS},
        'resources', json_object('llm', json_object('resource_type', 'llm', 'endpoint', 'http://127.0.0.1:8000/v1', 'model', 'qwen-' || v),
          'prompt', json_object('resource_type', 'prompt_template', 'template', 'Answer: {question}', 'engine', 'f-string'))) AS data
    FROM range(${RESOURCE_VERSIONS}) r(v)
    UNION ALL
    SELECT 'worker', 'runner-' || w, ${rollouts} * 16 + ${RESOURCE_VERSIONS} + w,
      json_object('worker_id', 'runner-' || w, 'status', 'busy', 'heartbeat_stats', NULL,
        'last_heartbeat_time', ${T0} + ${rollouts} / 2, 'last_dequeue_time', ${T0} + ${rollouts} / 2, 'last_busy_time', ${T0} + ${rollouts} / 2,
        'last_idle_time', NULL, 'current_rollout_id', 'ro-' || lpad((${rollouts} - 1 - w)::VARCHAR, 8, '0'), 'current_attempt_id', NULL)
    FROM range(${WORKERS}) r(w)`;
  // Span j of rollout i: 0 the root, 1..calls LLM calls, the last a reward, tool calls between.
  const spanRows = `SELECT i, j, 'ro-' || lpad(i::VARCHAR, 8, '0') AS rid, 'at-' || i || '-1' AS aid, md5('t' || i) AS trace,
      lpad(format('{:x}', i * 1024 + j + 1), 16, '0') AS sid,
      CASE WHEN j = 0 THEN NULL ELSE lpad(format('{:x}', i * 1024 + 1), 16, '0') END AS parent,
      make_timestamp_ns(((${T0} + i / 2) * 1e9 + j * 50e6)::BIGINT) AS st
    FROM range(${rollouts}) r(i), range(${spansPerRollout}) s(j)`;
  const last = spansPerRollout - 1;
  const spans = `SELECT rid AS rollout_id, aid AS attempt_id, j + 1 AS sequence_id, trace AS trace_id, sid AS span_id,
      parent AS parent_id,
      CASE WHEN j = 0 THEN 'agent.run' WHEN j <= ${callsPerRollout} THEN 'chat qwen' WHEN j = ${last} THEN 'agentlightning.annotation' ELSE 'tool.calculator' END AS name,
      CASE WHEN j BETWEEN 1 AND ${callsPerRollout} THEN 'CLIENT' ELSE 'INTERNAL' END AS kind,
      st AS start_time, st + INTERVAL (CASE WHEN j = 0 THEN ${spansPerRollout * 50} ELSE 40 END) MILLISECOND AS end_time,
      'OK' AS status_code, NULL AS status_message,
      CASE WHEN j = 0 THEN json_object('agent.name', 'solver')
        WHEN j <= ${callsPerRollout} THEN json_object('gen_ai.request.model', 'qwen', 'gen_ai.usage.input_tokens', 40 + j, 'gen_ai.usage.output_tokens', 12)
        WHEN j = ${last} THEN json_object('agentlightning.reward.0.name', 'primary', 'agentlightning.reward.0.value', CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END)
        ELSE json_object('tool.name', 'calculator', 'input', (i % 1000) || ' + ' || j) END AS attributes,
      '[]' AS events, '[]' AS links, json_object('service.name', 'agent') AS resource, 'agl' AS scope_name,
      NULL AS scope_version, 'agent' AS service_name, NULL AS trace_state, 1 AS flags,
      i * ${spansPerRollout} + j AS commit_seq
    FROM (${spanRows})`;
  const calls = `SELECT rid AS rollout_id, aid AS attempt_id, trace AS trace_id, sid AS span_id, parent AS parent_id,
      'chat qwen' AS name, j + 1 AS sequence_id, st AS start_time, st + INTERVAL 40 MILLISECOND AS end_time,
      'openai' AS provider, 'qwen' AS model,
      json_array(json_object('role', 'user', 'content', 'step ' || j)) AS input_messages,
      json_array(json_object('role', 'assistant', 'content', 'ok')) AS output_messages,
      NULL AS tools, NULL AS prompt_token_ids, NULL AS response_token_ids, NULL AS response_logprobs,
      40 + j AS input_tokens, 12 AS output_tokens, 'chatcmpl-' || i || '-' || j AS response_id, 'stop' AS finish_reason,
      1 AS dialect, rid || '/' || aid AS group_id, 'solver' AS agent_name,
      CASE WHEN j = ${callsPerRollout} THEN CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END END AS reward, true AS in_triplets,
      json_object('temperature', 0.7) AS parameters, NULL AS extra_parts
    FROM (${spanRows}) WHERE j BETWEEN 1 AND ${callsPerRollout}`;
  const rewards = `SELECT rid AS rollout_id, aid AS attempt_id, trace AS trace_id, sid AS span_id, parent AS parent_id,
      j + 1 AS sequence_id, st AS time, 'primary' AS name, CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END AS value, true AS is_primary,
      NULL AS feedback, 'agent' AS source, NULL AS label
    FROM (${spanRows}) WHERE j = ${last}`;
  const agents = `SELECT trace AS trace_id, sid AS span_id, 'solver' AS agent_name FROM (${spanRows}) WHERE j = 0`;
  return [
    { table: 'state_history', select: history },
    { table: 'state_history', select: extra },
    { table: 'spans', select: spans },
    { table: 'derived_calls', select: calls },
    { table: 'derived_rewards', select: rewards },
    { table: 'derived_agents', select: agents },
  ];
}
