import { DuckDBInstance } from '@duckdb/node-api';
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
 */
export async function fillDashboardStore(path: string, data: DashboardData): Promise<void> {
  const store = await DuckDBStore.open({ path, deriveWhenIdleMs: Infinity });
  await store.close();
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  try {
    for (const sql of fillSql(data)) await connection.run(sql);
    await connection.run('CHECKPOINT');
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}

function fillSql({ rollouts, spansPerRollout, callsPerRollout }: DashboardData): string[] {
  const status = `CASE WHEN i % 997 = 3 THEN 'queuing' WHEN i % 499 = 2 THEN 'running' WHEN i % 20 = 0 THEN 'failed' ELSE 'succeeded' END`;
  const rollout = `SELECT i, 'ro-' || lpad(i::VARCHAR, 8, '0') AS id, ${T0} + i / 2 AS t, ${status} AS status,
      CASE WHEN i % 5 = 0 THEN 'val' ELSE 'train' END AS mode, 'rs-' || (i * ${RESOURCE_VERSIONS} // ${rollouts}) AS rs,
      json_object('question', 'What is ' || (i % 1000) || ' + ' || (i % 77) || '?', 'answer', i % 1000 + i % 77) AS input
    FROM range(${rollouts}) r(i)`;
  // Versions: 16 per rollout, in its order; a failed rollout's second attempt takes 4-7.
  const history = `INSERT INTO state_history
    WITH r AS (${rollout}),
    steps AS (
      SELECT r.*, s.step FROM r, (VALUES ('queuing'), ('running'), ('final')) s(step)
      WHERE s.step = 'queuing' OR (r.status <> 'queuing' AND (s.step = 'running' OR r.status IN ('succeeded', 'failed')))
    ),
    attempts AS (
      SELECT r.*, a.n, s.step FROM r, range(1, 3) a(n), (VALUES ('preparing'), ('running'), ('final')) s(step)
      WHERE r.status <> 'queuing' AND (a.n = 1 OR r.status = 'failed')
        AND (s.step <> 'final' OR r.status IN ('succeeded', 'failed'))
    )
    SELECT 'rollout', id, i * 16 + CASE step WHEN 'queuing' THEN 0 WHEN 'running' THEN 1 ELSE 15 END,
      json_object('rollout_id', id, 'input', input, 'start_time', t, 'end_time', CASE WHEN step = 'final' THEN t + 3 + i % 7 END,
        'mode', mode, 'resources_id', rs, 'status', CASE step WHEN 'final' THEN status ELSE step END,
        'config', json_object('timeout_seconds', NULL, 'unresponsive_seconds', NULL, 'max_attempts', 2, 'retry_condition', ['failed']),
        'metadata', json_object())
    FROM steps
    UNION ALL
    SELECT 'attempt', id || '/at-' || i || '-' || n, i * 16 + n * 4 + CASE step WHEN 'preparing' THEN 0 WHEN 'running' THEN 1 ELSE 2 END,
      json_object('rollout_id', id, 'attempt_id', 'at-' || i || '-' || n, 'sequence_id', n, 'start_time', t + n,
        'end_time', CASE WHEN step = 'final' THEN t + 3 + i % 7 END,
        'status', CASE WHEN step <> 'final' THEN step WHEN status = 'failed' THEN 'failed' ELSE 'succeeded' END,
        'worker_id', 'runner-' || (i % ${WORKERS}), 'last_heartbeat_time', t + 2, 'metadata', json_object())
    FROM attempts`;
  const extra = `INSERT INTO state_history
    SELECT 'resources', 'rs-' || v, ${rollouts} * 16 + v,
      json_object('resources_id', 'rs-' || v, 'version', 1, 'create_time', ${T0} + v * ${rollouts} / ${2 * RESOURCE_VERSIONS},
        'update_time', ${T0} + v * ${rollouts} / ${2 * RESOURCE_VERSIONS},
        'resources', json_object('llm', json_object('resource_type', 'llm', 'endpoint', 'http://127.0.0.1:8000/v1', 'model', 'qwen-' || v),
          'prompt', json_object('resource_type', 'prompt_template', 'template', 'Answer: {question}', 'engine', 'f-string')))
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
  const spans = `INSERT INTO spans
    SELECT rid, aid, j + 1, trace, sid, parent,
      CASE WHEN j = 0 THEN 'agent.run' WHEN j <= ${callsPerRollout} THEN 'chat qwen' WHEN j = ${last} THEN 'agentlightning.annotation' ELSE 'tool.calculator' END,
      CASE WHEN j BETWEEN 1 AND ${callsPerRollout} THEN 'CLIENT' ELSE 'INTERNAL' END,
      st, st + INTERVAL (CASE WHEN j = 0 THEN ${spansPerRollout * 50} ELSE 40 END) MILLISECOND, 'OK', NULL,
      CASE WHEN j = 0 THEN json_object('agent.name', 'solver')
        WHEN j <= ${callsPerRollout} THEN json_object('gen_ai.request.model', 'qwen', 'gen_ai.usage.input_tokens', 40 + j, 'gen_ai.usage.output_tokens', 12)
        WHEN j = ${last} THEN json_object('agentlightning.reward.0.name', 'primary', 'agentlightning.reward.0.value', CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END)
        ELSE json_object('tool.name', 'calculator', 'input', (i % 1000) || ' + ' || j) END,
      '[]', '[]', json_object('service.name', 'agent'), 'agl', NULL, 'agent', NULL, 1
    FROM (${spanRows})`;
  const calls = `INSERT INTO derived_calls
    SELECT rid, aid, trace, sid, parent, 'chat qwen', j + 1, st, st + INTERVAL 40 MILLISECOND, 'openai', 'qwen',
      json_array(json_object('role', 'user', 'content', 'step ' || j)), json_array(json_object('role', 'assistant', 'content', 'ok')),
      NULL, NULL, NULL, NULL, 40 + j, 12, 'chatcmpl-' || i || '-' || j, 'stop', 1,
      rid || '/' || aid, 'solver', CASE WHEN j = ${callsPerRollout} THEN CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END END, true
    FROM (${spanRows}) WHERE j BETWEEN 1 AND ${callsPerRollout}`;
  const rewards = `INSERT INTO derived_rewards
    SELECT rid, aid, trace, sid, parent, j + 1, st, 'primary', CASE WHEN i % 3 = 0 THEN 0.0 ELSE 1.0 END, true
    FROM (${spanRows}) WHERE j = ${last}`;
  const agents = `INSERT INTO derived_agents SELECT trace, sid, 'solver' FROM (${spanRows}) WHERE j = 0`;
  const watermark = `UPDATE agl_meta SET value = (SELECT max(rowid) FROM spans)::VARCHAR WHERE key = 'derived_through'`;
  return [history, extra, spans, calls, rewards, agents, watermark];
}
