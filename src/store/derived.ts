import type { DuckDBConnection } from '@duckdb/node-api';
import type { ByteColumn, ColumnarRows } from './columns.js';
import { SPAN } from './tables.js';

/**
 * Tables derived from single spans as they are stored: the normalized LLM calls
 * (`llm_call_rows`), the rewards (`reward_rows`) and the spans that name an agent
 * (`agent_spans`). Each span's JSON is parsed once, in the commit that stores it, instead of on
 * every read: the views and adapters over these tables then read plain columns (the export of
 * 100,000 rollouts went from minutes to seconds).
 *
 * Spans that may hold one of them (`mayDerive`, a byte search in the attributes) are appended
 * to `span_inbox` instead of `spans`; `DERIVE_FROM_INBOX` moves them on in the same
 * transaction. When this module's SQL changes, `DERIVED_VERSION` goes up and the next writable
 * open derives every stored span again (`refreshDerivedTables`).
 */
export const DERIVED_VERSION = '1';

const FLAT_KEY = String.raw`^(gen_ai\.prompt|gen_ai\.completion|llm\.input_messages|llm\.output_messages|llm\.tools|llm\.request\.functions)\.(\d+)\.(?:message\.|tool\.)?(.+)$`;
const FLAT_TOOL_CALL = String.raw`^tool_calls\.(\d+)\.(?:tool_call\.)?(?:function\.)?(name|arguments|id)$`;

/** Attribute keys (as they appear in the attributes JSON) of a span that derives a row. */
const MARKERS = [
  '"agl.llm.api"', '"gen_ai.input.messages"', '"gen_ai.prompt.', '"llm.input_messages.', // LLM calls
  '"agentlightning.reward', '"reward"', // rewards (Agent Lightning v0.3 and v0.2)
  'agent.name"', '"openinference.span.kind"', '"agentlightning.operation.name"', '"langchain.run_type"', // agents
].map((marker) => Buffer.from(marker));

/** True when the span at `row` may derive a row (a false positive only costs a little work). */
export function mayDerive(rows: ColumnarRows, row: number): boolean {
  const attributes = rows.columns[SPAN.attributes];
  let text: Uint8Array;
  if (Array.isArray(attributes)) text = Buffer.from(String(attributes[row] ?? ''));
  else {
    const c = attributes as ByteColumn;
    text = c.data.subarray(c.slices[2 * row], c.slices[2 * row + 1]);
  }
  const bytes = Buffer.from(text.buffer, text.byteOffset, text.byteLength);
  return MARKERS.some((marker) => bytes.includes(marker));
}

const CALL_COLUMNS = `rollout_id VARCHAR, attempt_id VARCHAR, trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_id VARCHAR, name VARCHAR,
  sequence_id BIGINT, start_time TIMESTAMP_NS, end_time TIMESTAMP_NS, provider VARCHAR, model VARCHAR,
  input_messages JSON, output_messages JSON, tools JSON, prompt_token_ids INTEGER[], response_token_ids INTEGER[], response_logprobs DOUBLE[],
  input_tokens BIGINT, output_tokens BIGINT, response_id VARCHAR, finish_reason VARCHAR,
  dialect TINYINT NOT NULL`;

export const DERIVED_TABLES_DDL = `
CREATE TABLE llm_call_rows (${CALL_COLUMNS});
CREATE TABLE reward_rows (rollout_id VARCHAR, attempt_id VARCHAR, trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_id VARCHAR,
  sequence_id BIGINT, time TIMESTAMP_NS, name VARCHAR, value DOUBLE, is_primary BOOLEAN NOT NULL);
CREATE TABLE agent_spans (trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, agent_name VARCHAR NOT NULL);`;

/** The GenAI summary attributes every dialect reads, in one parse of the attributes (list `f`). */
const SPAN_FIELD_KEYS = [
  'gen_ai.provider.name', 'gen_ai.system', 'llm.provider', 'llm.system', // 1-4 provider
  'gen_ai.response.model', 'gen_ai.request.model', 'llm.model_name', // 5-7 model
  'gen_ai.usage.input_tokens', 'gen_ai.usage.prompt_tokens', 'llm.token_count.prompt', // 8-10
  'gen_ai.usage.output_tokens', 'gen_ai.usage.completion_tokens', 'llm.token_count.completion', // 11-13
  'gen_ai.response.id', 'gen_ai.response.finish_reasons', // 14-15
  'agl.llm.api', 'agl.llm.request', 'agl.llm.response', // 16-18
  'gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.system_instructions', 'gen_ai.tool.definitions', // 19-22
  'gen_ai.prompt.0.role', 'gen_ai.prompt.0.content', 'llm.input_messages.0.message.role', // 23-25
];
const FIELDS = `json_extract_string(attributes, [${SPAN_FIELD_KEYS.map((k) => `'${k}'`).join(', ')}])`;

const SPAN_COLUMNS = `rollout_id, attempt_id, trace_id, span_id, parent_id, name, sequence_id, start_time, end_time,
  coalesce(f[1], f[2], f[3], f[4]) AS provider`;

const FROM_INBOX = `(SELECT *, ${FIELDS} AS f FROM span_inbox)`;

/**
 * LLM calls, one row per span, in OpenAI chat format (messages with role, content, tool_calls,
 * tool_call_id), by dialect:
 *   1. agl's own capture and gateway: the exact HTTP exchange (`agl.llm.request` / `.response`);
 *   2. OpenTelemetry GenAI conventions with `gen_ai.input.messages` (parts format);
 *   3. flattened attributes: OpenLLMetry `gen_ai.prompt.N.*`, OpenInference `llm.input_messages.N.*`.
 * (4, GenAI log-record events, joins logs to spans and lives in the `llm_calls` view.)
 * Every parse of recorded text is wrapped in try(): a malformed body gives NULL columns, never
 * a failed commit.
 */
const DERIVE_CALLS = `
INSERT INTO llm_call_rows
WITH
src AS (SELECT * FROM ${FROM_INBOX}),
agl AS (
  SELECT *, f[16] AS api,
    try(json_extract(f[17], ['messages', 'prompt', 'instructions', 'input', 'tools', 'model'])) AS q,
    try(json_extract(f[18], ['id', 'model', 'prompt_token_ids', '$.choices[0].prompt_token_ids', '$.provider_specific_fields.prompt_token_ids',
      '$.choices[0].token_ids', '$.choices[0].provider_specific_fields.token_ids', '$.choices[0].logprobs', 'usage', '$.choices[0].finish_reason',
      'status', 'choices', 'output'])) AS r
  FROM src WHERE f[16] IN ('chat', 'text_completion', 'responses')
),
agl_calls AS (
  SELECT ${SPAN_COLUMNS},
    coalesce(r[2]->>'$', q[6]->>'$', coalesce(f[5], f[6], f[7])) AS model,
    CASE WHEN q IS NULL THEN NULL
      WHEN api = 'chat' THEN q[1]
      WHEN api = 'text_completion' THEN json_array(json_object('role', 'user', 'content', q[2]))
      ELSE to_json(list_concat(
        CASE WHEN (q[3]->>'$') IS NOT NULL THEN [json_object('role', 'system', 'content', q[3]->>'$')] ELSE [] END,
        CASE WHEN json_type(q[4]) = 'VARCHAR' THEN [json_object('role', 'user', 'content', q[4]->>'$')] ELSE try_cast(q[4] AS JSON[]) END))
    END AS input_messages,
    CASE api
      WHEN 'chat' THEN to_json(try(json_extract(r[12], '$[*].message')))
      WHEN 'text_completion' THEN to_json(list_transform(try(json_extract_string(r[12], '$[*].text')), lambda t: json_object('role', 'assistant', 'content', t)))
      ELSE r[13]
    END AS output_messages,
    q[5] AS tools,
    TRY_CAST(coalesce(r[3], r[4], r[5]) AS INTEGER[]) AS prompt_token_ids,
    TRY_CAST(coalesce(r[6], r[7]) AS INTEGER[]) AS response_token_ids,
    CASE
      WHEN json_exists(r[8], '$.content') THEN TRY_CAST(try(json_extract(r[8], '$.content[*].logprob')) AS DOUBLE[])
      ELSE TRY_CAST(r[8]->'token_logprobs' AS DOUBLE[])
    END AS response_logprobs,
    coalesce(TRY_CAST(coalesce(r[9]->>'prompt_tokens', r[9]->>'input_tokens') AS BIGINT), TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT)) AS input_tokens,
    coalesce(TRY_CAST(coalesce(r[9]->>'completion_tokens', r[9]->>'output_tokens') AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT)) AS output_tokens,
    coalesce(r[1]->>'$', f[14]) AS response_id,
    coalesce(r[10]->>'$', r[11]->>'$', try(f[15]->>0)) AS finish_reason,
    1 AS dialect
  FROM agl
),
semconv AS (
  SELECT *, try(json(f[19])) AS inputs, try(json(f[20])) AS outputs, try(json(f[21])) AS system
  FROM src WHERE f[19] IS NOT NULL AND f[16] IS NULL
),
semconv_calls AS (
  SELECT ${SPAN_COLUMNS}, coalesce(f[5], f[6], f[7]) AS model,
    to_json(list_concat(
      CASE WHEN system IS NOT NULL THEN [json_object('role', 'system', 'content',
        array_to_string(list_transform(try_cast(system AS JSON[]), lambda p: p->>'content'), ''))] ELSE [] END,
      list_transform(try_cast(inputs AS JSON[]), lambda m: agl_semconv_message(m)))) AS input_messages,
    to_json(list_transform(try_cast(outputs AS JSON[]), lambda m: agl_semconv_message(m))) AS output_messages,
    try(json(f[22])) AS tools,
    NULL::INTEGER[], NULL::INTEGER[], NULL::DOUBLE[],
    TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT), f[14],
    coalesce(try_cast(outputs AS JSON[])[1]->>'finish_reason', try(f[15]->>0)),
    2
  FROM semconv
),
flat_src AS (
  SELECT * FROM src WHERE (f[23] IS NOT NULL OR f[24] IS NOT NULL OR f[25] IS NOT NULL) AND f[16] IS NULL AND f[19] IS NULL
),
flat AS (
  SELECT s.trace_id, s.span_id, x['side'] AS side, CAST(x['idx'] AS INTEGER) AS idx, x['field'] AS field, s.attributes->>k AS value
  FROM flat_src s, unnest(json_keys(s.attributes)) AS t(k), (SELECT regexp_extract(k, '${FLAT_KEY}', ['side', 'idx', 'field']) AS x)
  WHERE x['side'] <> ''
),
flat_tool_calls AS (
  SELECT trace_id, span_id, side, idx, list(json_object('id', id, 'type', 'function', 'function', json_object('name', name, 'arguments', arguments)) ORDER BY j) AS calls
  FROM (
    SELECT trace_id, span_id, side, idx, CAST(c['j'] AS INTEGER) AS j,
      max(value) FILTER (WHERE c['f'] = 'id') AS id, max(value) FILTER (WHERE c['f'] = 'name') AS name,
      max(value) FILTER (WHERE c['f'] = 'arguments') AS arguments
    FROM flat, (SELECT regexp_extract(field, '${FLAT_TOOL_CALL}', ['j', 'f']) AS c)
    WHERE c['j'] <> '' GROUP BY ALL
  ) GROUP BY ALL
),
flat_items AS (
  SELECT trace_id, span_id, side, idx,
    max(value) FILTER (WHERE field = 'role') AS role, max(value) FILTER (WHERE field = 'content') AS content,
    max(value) FILTER (WHERE field = 'tool_call_id') AS tool_call_id, max(value) FILTER (WHERE field = 'finish_reason') AS finish_reason,
    max(value) FILTER (WHERE field = 'json_schema') AS json_schema, max(value) FILTER (WHERE field = 'name') AS name,
    max(value) FILTER (WHERE field = 'description') AS description, max(value) FILTER (WHERE field = 'parameters') AS parameters
  FROM flat GROUP BY ALL
),
flat_messages AS (
  SELECT i.trace_id, i.span_id,
    to_json(list(json_merge_patch(json_object('role', i.role, 'content', i.content),
      json_object('tool_call_id', i.tool_call_id, 'tool_calls', to_json(c.calls))) ORDER BY i.idx) FILTER (WHERE i.side IN ('gen_ai.prompt', 'llm.input_messages'))) AS input_messages,
    to_json(list(json_merge_patch(json_object('role', i.role, 'content', i.content),
      json_object('tool_call_id', i.tool_call_id, 'tool_calls', to_json(c.calls))) ORDER BY i.idx) FILTER (WHERE i.side IN ('gen_ai.completion', 'llm.output_messages'))) AS output_messages,
    nullif(to_json(list(CASE WHEN i.side = 'llm.tools' THEN try(json(i.json_schema))
      ELSE json_object('type', 'function', 'function', json_object('name', i.name, 'description', i.description, 'parameters', try(json(i.parameters)))) END
      ORDER BY i.idx) FILTER (WHERE i.side IN ('llm.tools', 'llm.request.functions'))), '[]'::JSON) AS tools,
    min(i.finish_reason ORDER BY i.idx) FILTER (WHERE i.side = 'gen_ai.completion') AS finish_reason
  FROM flat_items i LEFT JOIN flat_tool_calls c USING (trace_id, span_id, side, idx)
  GROUP BY i.trace_id, i.span_id
),
flat_calls AS (
  SELECT ${SPAN_COLUMNS}, coalesce(f[5], f[6], f[7]) AS model,
    m.input_messages, m.output_messages, m.tools,
    NULL::INTEGER[], NULL::INTEGER[], NULL::DOUBLE[],
    TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT), f[14],
    coalesce(m.finish_reason, try(f[15]->>0)),
    3
  FROM flat_messages m JOIN flat_src s USING (trace_id, span_id)
)
SELECT * FROM agl_calls UNION ALL SELECT * FROM semconv_calls UNION ALL SELECT * FROM flat_calls`;

/** Agent Lightning's reward spans: `agentlightning.reward.<i>.name/.value`, and v0.2's one reward per span. */
const DERIVE_REWARDS = `
INSERT INTO reward_rows
SELECT s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.parent_id, s.sequence_id, s.start_time,
  s.attributes->>('agentlightning.reward.' || r.i || '.name'), TRY_CAST(s.attributes->>k AS DOUBLE), r.i = 0
FROM (SELECT * FROM span_inbox WHERE (attributes->>'agentlightning.reward.0.value') IS NOT NULL) s,
  unnest(json_keys(s.attributes)) AS t(k), (SELECT TRY_CAST(nullif(regexp_extract(k, '^agentlightning\\.reward\\.(\\d+)\\.value$', 1), '') AS INTEGER) AS i) r
WHERE r.i IS NOT NULL
UNION ALL
SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, start_time, 'primary', TRY_CAST(attributes->>'reward' AS DOUBLE), true
FROM span_inbox WHERE name = 'agentlightning.reward' AND (attributes->>'reward') IS NOT NULL`;

/** The agent a span names, in order of preference (one parse of the attributes). */
const DERIVE_AGENTS = `
INSERT INTO agent_spans
SELECT trace_id, span_id, agent_name FROM (
  SELECT trace_id, span_id, coalesce(a[1], a[2], CASE WHEN a[3] = 'AGENT' THEN name END, a[4], CASE WHEN a[5] = 'chain' THEN name END) AS agent_name
  FROM (SELECT trace_id, span_id, name, json_extract_string(attributes, ['agent.name', 'gen_ai.agent.name', 'openinference.span.kind', 'agentlightning.operation.name', 'langchain.run_type']) AS a
    FROM span_inbox)
) WHERE agent_name IS NOT NULL`;

/** Runs in the commit that appended rows to `span_inbox`. */
export const DERIVE_FROM_INBOX = `${DERIVE_CALLS};
${DERIVE_REWARDS};
${DERIVE_AGENTS};
INSERT INTO spans SELECT * FROM span_inbox;
DELETE FROM span_inbox;`;

export const INBOX_DDL = 'CREATE TEMP TABLE IF NOT EXISTS span_inbox AS SELECT * FROM spans LIMIT 0';

/**
 * On a writable open: creates the writer connection's inbox, and derives every stored span again
 * when the file's derived tables were made by another version of this module.
 */
export async function refreshDerivedTables(connection: DuckDBConnection): Promise<void> {
  await connection.run(INBOX_DDL);
  const reader = await connection.runAndReadAll("SELECT value FROM agl_meta WHERE key = 'derived_version'");
  if (reader.currentRowCount > 0 && String(reader.getRows()[0][0]) === DERIVED_VERSION) return;
  await connection.run('BEGIN TRANSACTION');
  try {
    await connection.run('DELETE FROM llm_call_rows; DELETE FROM reward_rows; DELETE FROM agent_spans;');
    // The inbox statements, reading the stored spans instead (and not storing them again).
    const derive = [DERIVE_CALLS, DERIVE_REWARDS, DERIVE_AGENTS].map((sql) => sql.replaceAll('span_inbox', 'spans')).join(';\n');
    await connection.run(derive);
    await connection.run("INSERT OR REPLACE INTO agl_meta VALUES ('derived_version', $version)", { version: DERIVED_VERSION });
    await connection.run('COMMIT');
  } catch (error) {
    await connection.run('ROLLBACK');
    throw error;
  }
}
