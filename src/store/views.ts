/**
 * The SQL views `llm_calls` and `rewards` (DESIGN.md, "SQL"). They hold no data, so they are
 * re-created on every writable open: a file always shows this agl's definitions.
 *
 * `llm_calls` gives one row per LLM call in OpenAI chat format (messages with role, content,
 * tool_calls, tool_call_id), whichever dialect recorded it, by precedence:
 *   1. agl's own capture and gateway: the exact HTTP exchange (`agl.llm.request` / `.response`);
 *   2. OpenTelemetry GenAI conventions with `gen_ai.input.messages` (parts format);
 *   3. flattened attributes: OpenLLMetry `gen_ai.prompt.N.*`, OpenInference `llm.input_messages.N.*`;
 *   4. GenAI log-record events (`gen_ai.user.message`, `gen_ai.choice`, ... of
 *      @opentelemetry/instrumentation-openai), joined to their span by trace and span id.
 * A call that two instrumentations both describe (a framework span whose child, or whose
 * response id, is an agl capture) is the agl row only; an agent's own capture of a call it made
 * through the gateway is the gateway's row only.
 */

const FLAT_KEY = String.raw`^(gen_ai\.prompt|gen_ai\.completion|llm\.input_messages|llm\.output_messages|llm\.tools|llm\.request\.functions)\.(\d+)\.(?:message\.|tool\.)?(.+)$`;
const FLAT_TOOL_CALL = String.raw`^tool_calls\.(\d+)\.(?:tool_call\.)?(?:function\.)?(name|arguments|id)$`;

const COLUMNS = `rollout_id, attempt_id, trace_id, span_id, sequence_id, start_time, end_time, provider, model,
  input_messages, output_messages, tools, prompt_token_ids, response_token_ids, response_logprobs,
  input_tokens, output_tokens, response_id, finish_reason`;

/** Columns every dialect reads from the span's own GenAI attributes. */
const SPAN_FIELDS = `s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.parent_id, s.sequence_id, s.start_time, s.end_time,
  coalesce(s.attributes->>'gen_ai.provider.name', s.attributes->>'gen_ai.system', s.attributes->>'llm.provider', s.attributes->>'llm.system') AS span_provider,
  coalesce(s.attributes->>'gen_ai.response.model', s.attributes->>'gen_ai.request.model', s.attributes->>'llm.model_name') AS span_model,
  TRY_CAST(coalesce(s.attributes->>'gen_ai.usage.input_tokens', s.attributes->>'gen_ai.usage.prompt_tokens', s.attributes->>'llm.token_count.prompt') AS BIGINT) AS span_input_tokens,
  TRY_CAST(coalesce(s.attributes->>'gen_ai.usage.output_tokens', s.attributes->>'gen_ai.usage.completion_tokens', s.attributes->>'llm.token_count.completion') AS BIGINT) AS span_output_tokens,
  s.attributes->>'gen_ai.response.id' AS span_response_id,
  s.attributes->'gen_ai.response.finish_reasons'->>0 AS span_finish_reason`;

export const VIEWS_SQL = `
CREATE OR REPLACE MACRO agl_semconv_message(m) AS json_merge_patch(
  json_object('role', m->>'role', 'content', coalesce(
    nullif(array_to_string(list_transform(list_filter(CAST(m->'parts' AS JSON[]), lambda p: p->>'type' = 'text'), lambda p: p->>'content'), ''), ''),
    list_transform(list_filter(CAST(m->'parts' AS JSON[]), lambda p: p->>'type' = 'tool_call_response'),
      lambda p: CASE WHEN json_type(p->'response') = 'VARCHAR' THEN p->>'response' ELSE CAST(p->'response' AS VARCHAR) END)[1])),
  json_object(
    'tool_calls', nullif(to_json(list_transform(list_filter(CAST(m->'parts' AS JSON[]), lambda p: p->>'type' = 'tool_call'),
      lambda p: json_object('id', p->>'id', 'type', 'function', 'function', json_object('name', p->>'name',
        'arguments', CASE WHEN json_type(p->'arguments') = 'VARCHAR' THEN p->>'arguments' ELSE CAST(p->'arguments' AS VARCHAR) END)))), '[]'::JSON),
    'tool_call_id', list_filter(CAST(m->'parts' AS JSON[]), lambda p: p->>'type' = 'tool_call_response')[1]->>'id'));

CREATE OR REPLACE VIEW llm_calls AS
WITH
agl AS (
  SELECT ${SPAN_FIELDS}, s.attributes->>'agl.llm.api' AS api,
    json(s.attributes->>'agl.llm.request') AS req, json(s.attributes->>'agl.llm.response') AS res
  FROM spans s WHERE (s.attributes->>'agl.llm.api') IN ('chat', 'text_completion', 'responses')
),
agl_calls AS (
  SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, start_time, end_time,
    span_provider AS provider,
    coalesce(res->>'model', req->>'model', span_model) AS model,
    CASE WHEN req IS NULL THEN NULL
      WHEN api = 'chat' THEN req->'messages'
      WHEN api = 'text_completion' THEN json_array(json_object('role', 'user', 'content', req->'prompt'))
      ELSE to_json(list_concat(
        CASE WHEN (req->>'instructions') IS NOT NULL THEN [json_object('role', 'system', 'content', req->>'instructions')] ELSE [] END,
        CASE WHEN json_type(req->'input') = 'VARCHAR' THEN [json_object('role', 'user', 'content', req->>'input')] ELSE CAST(req->'input' AS JSON[]) END))
    END AS input_messages,
    CASE api
      WHEN 'chat' THEN CASE WHEN json_exists(res, '$.choices') THEN to_json(json_extract(res, '$.choices[*].message')) END
      WHEN 'text_completion' THEN CASE WHEN json_exists(res, '$.choices') THEN to_json(list_transform(json_extract_string(res, '$.choices[*].text'), lambda t: json_object('role', 'assistant', 'content', t))) END
      ELSE res->'output'
    END AS output_messages,
    req->'tools' AS tools,
    CAST(coalesce(res->'prompt_token_ids', res->'$.choices[0].prompt_token_ids', res->'$.provider_specific_fields.prompt_token_ids') AS INTEGER[]) AS prompt_token_ids,
    CAST(coalesce(res->'$.choices[0].token_ids', res->'$.choices[0].provider_specific_fields.token_ids') AS INTEGER[]) AS response_token_ids,
    CASE
      WHEN json_exists(res, '$.choices[0].logprobs.content') THEN CAST(json_extract(res, '$.choices[0].logprobs.content[*].logprob') AS DOUBLE[])
      ELSE CAST(res->'$.choices[0].logprobs.token_logprobs' AS DOUBLE[])
    END AS response_logprobs,
    coalesce(TRY_CAST(coalesce(res->>'$.usage.prompt_tokens', res->>'$.usage.input_tokens') AS BIGINT), span_input_tokens) AS input_tokens,
    coalesce(TRY_CAST(coalesce(res->>'$.usage.completion_tokens', res->>'$.usage.output_tokens') AS BIGINT), span_output_tokens) AS output_tokens,
    coalesce(res->>'id', span_response_id) AS response_id,
    coalesce(res->>'$.choices[0].finish_reason', res->>'status', span_finish_reason) AS finish_reason
  FROM agl
),
semconv_calls AS (
  SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, start_time, end_time, span_provider AS provider, span_model AS model,
    to_json(list_concat(
      CASE WHEN system IS NOT NULL THEN [json_object('role', 'system', 'content',
        array_to_string(list_transform(CAST(system AS JSON[]), lambda p: p->>'content'), ''))] ELSE [] END,
      list_transform(CAST(inputs AS JSON[]), lambda m: agl_semconv_message(m)))) AS input_messages,
    to_json(list_transform(CAST(outputs AS JSON[]), lambda m: agl_semconv_message(m))) AS output_messages,
    tools,
    NULL::INTEGER[] AS prompt_token_ids, NULL::INTEGER[] AS response_token_ids, NULL::DOUBLE[] AS response_logprobs,
    span_input_tokens AS input_tokens, span_output_tokens AS output_tokens, span_response_id AS response_id,
    coalesce(CAST(outputs AS JSON[])[1]->>'finish_reason', span_finish_reason) AS finish_reason
  FROM (
    SELECT ${SPAN_FIELDS},
      json(s.attributes->>'gen_ai.input.messages') AS inputs, json(s.attributes->>'gen_ai.output.messages') AS outputs,
      json(s.attributes->>'gen_ai.system_instructions') AS system, json(s.attributes->>'gen_ai.tool.definitions') AS tools
    FROM spans s WHERE (s.attributes->>'gen_ai.input.messages') IS NOT NULL AND (s.attributes->>'agl.llm.api') IS NULL
  )
),
flat AS (
  SELECT s.span_id, f['side'] AS side, CAST(f['idx'] AS INTEGER) AS idx, f['field'] AS field, s.attributes->>k AS value
  FROM (
    SELECT span_id, attributes FROM spans
    WHERE ((attributes->>'gen_ai.prompt.0.role') IS NOT NULL OR (attributes->>'gen_ai.prompt.0.content') IS NOT NULL
        OR (attributes->>'llm.input_messages.0.message.role') IS NOT NULL)
      AND (attributes->>'agl.llm.api') IS NULL AND (attributes->>'gen_ai.input.messages') IS NULL
  ) s, unnest(json_keys(s.attributes)) AS t(k), (SELECT regexp_extract(k, '${FLAT_KEY}', ['side', 'idx', 'field']) AS f)
  WHERE f['side'] <> ''
),
flat_tool_calls AS (
  SELECT span_id, side, idx, list(json_object('id', id, 'type', 'function', 'function', json_object('name', name, 'arguments', arguments)) ORDER BY j) AS calls
  FROM (
    SELECT span_id, side, idx, CAST(c['j'] AS INTEGER) AS j,
      max(value) FILTER (WHERE c['f'] = 'id') AS id, max(value) FILTER (WHERE c['f'] = 'name') AS name,
      max(value) FILTER (WHERE c['f'] = 'arguments') AS arguments
    FROM flat, (SELECT regexp_extract(field, '${FLAT_TOOL_CALL}', ['j', 'f']) AS c)
    WHERE c['j'] <> '' GROUP BY ALL
  ) GROUP BY ALL
),
flat_items AS (
  SELECT f.span_id, f.side, f.idx,
    max(value) FILTER (WHERE field = 'role') AS role, max(value) FILTER (WHERE field = 'content') AS content,
    max(value) FILTER (WHERE field = 'tool_call_id') AS tool_call_id, max(value) FILTER (WHERE field = 'finish_reason') AS finish_reason,
    max(value) FILTER (WHERE field = 'json_schema') AS json_schema, max(value) FILTER (WHERE field = 'name') AS name,
    max(value) FILTER (WHERE field = 'description') AS description, max(value) FILTER (WHERE field = 'parameters') AS parameters
  FROM flat f GROUP BY ALL
),
flat_messages AS (
  SELECT i.span_id,
    to_json(list(json_merge_patch(json_object('role', i.role, 'content', i.content),
      json_object('tool_call_id', i.tool_call_id, 'tool_calls', to_json(c.calls))) ORDER BY i.idx) FILTER (WHERE i.side IN ('gen_ai.prompt', 'llm.input_messages'))) AS input_messages,
    to_json(list(json_merge_patch(json_object('role', i.role, 'content', i.content),
      json_object('tool_call_id', i.tool_call_id, 'tool_calls', to_json(c.calls))) ORDER BY i.idx) FILTER (WHERE i.side IN ('gen_ai.completion', 'llm.output_messages'))) AS output_messages,
    nullif(to_json(list(CASE WHEN i.side = 'llm.tools' THEN json(i.json_schema)
      ELSE json_object('type', 'function', 'function', json_object('name', i.name, 'description', i.description, 'parameters', json(i.parameters))) END
      ORDER BY i.idx) FILTER (WHERE i.side IN ('llm.tools', 'llm.request.functions'))), '[]'::JSON) AS tools,
    min(i.finish_reason ORDER BY i.idx) FILTER (WHERE i.side = 'gen_ai.completion') AS finish_reason
  FROM flat_items i LEFT JOIN flat_tool_calls c USING (span_id, side, idx)
  GROUP BY i.span_id
),
flat_calls AS (
  SELECT s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.parent_id, s.sequence_id, s.start_time, s.end_time, s.span_provider AS provider, s.span_model AS model,
    m.input_messages, m.output_messages, m.tools,
    NULL::INTEGER[] AS prompt_token_ids, NULL::INTEGER[] AS response_token_ids, NULL::DOUBLE[] AS response_logprobs,
    s.span_input_tokens AS input_tokens, s.span_output_tokens AS output_tokens, s.span_response_id AS response_id,
    coalesce(m.finish_reason, s.span_finish_reason) AS finish_reason
  FROM flat_messages m JOIN (SELECT ${SPAN_FIELDS} FROM spans s) s USING (span_id)
),
events AS (
  SELECT trace_id, span_id, coalesce(event_name, attributes->>'event.name') AS event, json(body) AS body, time
  FROM logs WHERE coalesce(event_name, attributes->>'event.name') LIKE 'gen\\_ai.%' ESCAPE '\\' AND span_id IS NOT NULL
),
event_messages AS (
  SELECT trace_id, span_id,
    to_json(list(json_merge_patch(
      json_object('role', regexp_extract(event, '^gen_ai\\.(\\w+)\\.message$', 1), 'content', body->'content'),
      json_object('tool_calls', body->'tool_calls', 'tool_call_id', CASE WHEN event = 'gen_ai.tool.message' THEN body->>'id' END))
      ORDER BY time) FILTER (WHERE event LIKE '%.message')) AS input_messages,
    to_json(list(json_merge_patch(json_object('role', coalesce(body->>'$.message.role', 'assistant'), 'content', body->'$.message.content'),
      json_object('tool_calls', body->'$.message.tool_calls')) ORDER BY TRY_CAST(body->>'index' AS INTEGER)) FILTER (WHERE event = 'gen_ai.choice')) AS output_messages,
    min(body->>'finish_reason' ORDER BY TRY_CAST(body->>'index' AS INTEGER)) FILTER (WHERE event = 'gen_ai.choice') AS finish_reason
  FROM events GROUP BY trace_id, span_id
),
event_calls AS (
  SELECT s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.parent_id, s.sequence_id, s.start_time, s.end_time, s.span_provider AS provider, s.span_model AS model,
    e.input_messages, e.output_messages, NULL::JSON AS tools,
    NULL::INTEGER[] AS prompt_token_ids, NULL::INTEGER[] AS response_token_ids, NULL::DOUBLE[] AS response_logprobs,
    s.span_input_tokens AS input_tokens, s.span_output_tokens AS output_tokens, s.span_response_id AS response_id,
    coalesce(e.finish_reason, s.span_finish_reason) AS finish_reason
  FROM event_messages e JOIN (SELECT ${SPAN_FIELDS} FROM spans s) s USING (trace_id, span_id)
),
others AS (
  SELECT *, 2 AS precedence FROM semconv_calls
  UNION ALL SELECT *, 3 FROM flat_calls
  UNION ALL SELECT *, 4 FROM event_calls
)
-- An instrumented agent calling through the gateway: the agent's capture is the parent of the
-- gateway's, which holds the exact upstream exchange (token ids); the gateway's row is kept.
SELECT ${COLUMNS} FROM agl_calls c
WHERE NOT EXISTS (SELECT 1 FROM agl_calls g WHERE g.trace_id = c.trace_id AND g.parent_id = c.span_id)
UNION ALL
SELECT ${COLUMNS} FROM others o
WHERE NOT EXISTS (SELECT 1 FROM agl_calls a WHERE a.trace_id = o.trace_id AND a.parent_id = o.span_id)
  AND NOT EXISTS (SELECT 1 FROM agl_calls a WHERE a.response_id = o.response_id)
QUALIFY row_number() OVER (PARTITION BY o.trace_id, o.span_id ORDER BY o.precedence) = 1;

CREATE OR REPLACE VIEW rewards AS
SELECT s.rollout_id, s.attempt_id, s.trace_id, s.span_id, s.sequence_id, s.start_time AS time,
  s.attributes->>('agentlightning.reward.' || r.i || '.name') AS name,
  TRY_CAST(s.attributes->>k AS DOUBLE) AS value,
  r.i = 0 AS is_primary
FROM (SELECT * FROM spans WHERE (attributes->>'agentlightning.reward.0.value') IS NOT NULL) s,
  unnest(json_keys(s.attributes)) AS t(k), (SELECT TRY_CAST(nullif(regexp_extract(k, '^agentlightning\\.reward\\.(\\d+)\\.value$', 1), '') AS INTEGER) AS i) r
WHERE r.i IS NOT NULL
UNION ALL
-- Agent Lightning v0.2 wrote one reward per span: name "agentlightning.reward", attribute "reward"
SELECT rollout_id, attempt_id, trace_id, span_id, sequence_id, start_time, 'primary', TRY_CAST(attributes->>'reward' AS DOUBLE), true
FROM spans WHERE name = 'agentlightning.reward' AND (attributes->>'reward') IS NOT NULL;
`;
