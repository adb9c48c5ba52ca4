/**
 * Rows derived from single spans: the normalized LLM calls, the rewards and the spans that name
 * an agent. Parsing a span's JSON once and keeping the result as plain columns is what makes
 * `llm_calls`, `rewards` and the adapters fast (the export of 100,000 rollouts went from
 * minutes to seconds).
 *
 * Derivation stays off the ingest path: spans are committed as they come, and the store's
 * deriver (src/store/deriver.ts) derives the ones after the watermark `derived_through` (a
 * `commit_seq` of `spans`, which only ever grows) into the `derived_*` tables while the server is idle. The
 * views `llm_call_rows`, `reward_rows` and `agent_spans` read those tables plus, derived on the
 * fly, the spans not derived yet: every read is complete, and fast once the deriver caught up.
 * When the SQL of this module, the deriver or credited-calls.ts changes what is derived,
 * DERIVED_VERSION goes up and the next writable open starts the derivation over
 * (src/store/schema.ts).
 */

import { ATTR, GENAI } from '../api/semconv.js';
import { detailsDocuments, PARAMETER_KEYS } from './genai-messages.js';
import { sqlText } from './literals.js';

export const DERIVED_VERSION = '9';

const FLAT_KEY = String.raw`^(gen_ai\.prompt|gen_ai\.completion|llm\.input_messages|llm\.output_messages|llm\.tools|llm\.request\.functions)\.(\d+)\.(?:message\.|tool\.)?(.+)$`;
const FLAT_TOOL_CALL = String.raw`^tool_calls\.(\d+)\.(?:tool_call\.)?(?:function\.)?(name|arguments|id)$`;

/** The columns of derived_calls that are a call's own (the others are its span's). */
export const CALL_FIELDS = [
  'provider',
  'model',
  'input_messages',
  'output_messages',
  'tools',
  'prompt_token_ids',
  'response_token_ids',
  'response_logprobs',
  'input_tokens',
  'output_tokens',
  'response_id',
  'finish_reason',
  'dialect',
  'parameters',
  'extra_parts',
] as const;

const CALL_COLUMNS = `rollout_id VARCHAR, attempt_id VARCHAR, trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_id VARCHAR, name VARCHAR,
  sequence_id BIGINT, start_time TIMESTAMP_NS, end_time TIMESTAMP_NS, provider VARCHAR, model VARCHAR,
  input_messages JSON, output_messages JSON, tools JSON, prompt_token_ids INTEGER[], response_token_ids INTEGER[], response_logprobs DOUBLE[],
  input_tokens BIGINT, output_tokens BIGINT, response_id VARCHAR, finish_reason VARCHAR,
  dialect TINYINT NOT NULL`;

export const DERIVED_TABLES_DDL = `
CREATE TABLE derived_calls (${CALL_COLUMNS});
CREATE TABLE derived_rewards (rollout_id VARCHAR, attempt_id VARCHAR, trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_id VARCHAR,
  sequence_id BIGINT, time TIMESTAMP_NS, name VARCHAR, value DOUBLE, is_primary BOOLEAN NOT NULL);
CREATE TABLE derived_agents (trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, agent_name VARCHAR NOT NULL);
INSERT OR REPLACE INTO agl_meta VALUES ('derived_through', '-1');`;

/**
 * Each call's answer to a triplet export with the default options, kept by the deriver: its
 * group (attempt, else trace), whether it counts, its agent and its matched reward. The rows of
 * derived_calls stay grouped by attempt and in call order, so such an export is a plain scan.
 */
export const DERIVED_CREDITS_DDL = `
ALTER TABLE derived_calls ADD COLUMN group_id VARCHAR;
ALTER TABLE derived_calls ADD COLUMN agent_name VARCHAR;
ALTER TABLE derived_calls ADD COLUMN reward DOUBLE;
ALTER TABLE derived_calls ADD COLUMN in_triplets BOOLEAN DEFAULT false;`;
export const CREDIT_COLUMNS = 'agent_name, reward, in_triplets';

/** A reward's text (agent explanation, feedback comment, judge reason) and who gave it (REWARD_SOURCES). */
export const DERIVED_REWARD_TEXT_DDL = `
ALTER TABLE derived_rewards ADD COLUMN feedback VARCHAR;
ALTER TABLE derived_rewards ADD COLUMN source VARCHAR;`;

/**
 * A call's request parameters (OpenAI's names) and the GenAI message parts chat messages cannot
 * hold (genai-messages.ts), after the credit columns: statements that write derived_calls name
 * their columns (BY NAME).
 */
export const DERIVED_CALL_PARTS_DDL = `
ALTER TABLE derived_calls ADD COLUMN parameters JSON;
ALTER TABLE derived_calls ADD COLUMN extra_parts JSON;`;

/** An evaluator's label of a reward (`gen_ai.evaluation.score.label`); NULL for agl's own rewards. */
export const DERIVED_REWARD_LABEL_DDL = `
ALTER TABLE derived_rewards ADD COLUMN label VARCHAR;`;

/** The feedback and source columns of a reward span `t` (its attributes). */
export const rewardTextOf = (t: string) =>
  `${t}.attributes->>'${ATTR.rewardFeedback}' AS feedback, coalesce(${t}.attributes->>'${ATTR.rewardSource}', 'agent') AS source`;

/** The GenAI summary attributes every dialect reads, in one parse of the attributes (list `f`). */
const SPAN_FIELD_KEYS = [
  'gen_ai.provider.name',
  'gen_ai.system',
  'llm.provider',
  'llm.system', // 1-4 provider
  'gen_ai.response.model',
  'gen_ai.request.model',
  'llm.model_name', // 5-7 model
  'gen_ai.usage.input_tokens',
  'gen_ai.usage.prompt_tokens',
  'llm.token_count.prompt', // 8-10
  'gen_ai.usage.output_tokens',
  'gen_ai.usage.completion_tokens',
  'llm.token_count.completion', // 11-13
  'gen_ai.response.id',
  'gen_ai.response.finish_reasons', // 14-15
  'agl.llm.api',
  'agl.llm.request',
  'agl.llm.response', // 16-18
  'gen_ai.input.messages',
  'gen_ai.output.messages',
  'gen_ai.system_instructions',
  'gen_ai.tool.definitions', // 19-22
  'gen_ai.prompt.0.role',
  'gen_ai.prompt.0.content',
  'llm.input_messages.0.message.role', // 23-25
  'agl.gateway', // 26
  'gen_ai.operation.name', // 27
  ...PARAMETER_KEYS, // 28-
];
/** The request parameters' texts in `f`, as agl_genai_parameters takes them. */
const PARAMETER_TEXTS = `f[28:${27 + PARAMETER_KEYS.length}]`;
/** The GenAI attributes llm_calls reads (the coverage figure of test/collector/genai-semconv.test.ts). */
export const GENAI_ATTRIBUTES_READ = SPAN_FIELD_KEYS.filter((key) => key.startsWith('gen_ai.'));
const FIELDS = `json_extract_string(attributes, [${SPAN_FIELD_KEYS.map((k) => `'${k}'`).join(', ')}])`;

// Lower case: OpenLLMetry names providers as products (`Anthropic`, `OpenAI`), the GenAI conventions in lower case.
const SPAN_COLUMNS = `rollout_id, attempt_id, trace_id, span_id, parent_id, name, sequence_id, start_time, end_time,
  lower(coalesce(f[1], f[2], f[3], f[4])) AS provider`;

/** The `gen_ai.operation.name`s of a model inference (not embeddings, tools or agents). */
const INFERENCE_OPERATIONS = "('chat', 'text_completion', 'generate_content')";
/** Whether a span (of `src`) has GenAI documents: as attributes, or on an operation.details span event. */
const SEMCONV_DOCUMENTS = `(f[19] IS NOT NULL OR f[20] IS NOT NULL
  OR (contains(events, '"${GENAI.operationDetails}"') AND (f[27] IS NULL OR f[27] IN ${INFERENCE_OPERATIONS})))`;

/**
 * agl's own captures' answers (`agl.llm.response`) in one parse, typed (ANSWER_STRUCTURE, as
 * json_transform takes it): token ids and logprobs as lists, the small values as JSON. Read as
 * JSON texts by path, the token ids were written out as text and parsed again, three to five
 * times an answer (the calls of a GRPO batch's 8,192 answers of 14 KB, before the deriver: 4.1
 * s of CPU, 2.8 s typed). json_transform gives NULL for a JSON null as for a missing key:
 * json_type on ANSWER_PATHS tells them apart where it matters (a null prompt_token_ids ends the
 * choice between paths, a null output or content is the JSON null) and whether there are choices.
 */
const ANSWER_PATHS = [
  'prompt_token_ids',
  '$.choices[0].prompt_token_ids',
  '$.provider_specific_fields.prompt_token_ids', // 1-3 prompt
  '$.choices[0].token_ids',
  '$.choices[0].provider_specific_fields.token_ids', // 4-5 response
  '$.choices[0].logprobs.content', // 6
  'choices',
  'output',
  'content', // 7-9
];
const ANSWER_STRUCTURE = {
  id: 'JSON',
  model: 'JSON',
  usage: 'JSON',
  status: 'JSON',
  output: 'JSON',
  content: 'JSON',
  stop_reason: 'JSON',
  prompt_token_ids: 'INTEGER[]',
  provider_specific_fields: { prompt_token_ids: 'INTEGER[]' },
  choices: [
    {
      message: 'JSON',
      finish_reason: 'JSON',
      prompt_token_ids: 'INTEGER[]',
      token_ids: 'INTEGER[]',
      provider_specific_fields: { token_ids: 'INTEGER[]' },
      logprobs: { content: [{ logprob: 'DOUBLE' }], token_logprobs: 'DOUBLE[]' },
    },
  ],
};

/**
 * Whether a typed value that, where not NULL, shows that the answer has its path of
 * ANSWER_PATHS is NULL: json_type, a parse of the answer of its own, runs only then (not for
 * an answer with token ids and logprobs: 0.25 s of CPU a GRPO batch of 8,192). Each test is of
 * one typed value: a CASE choosing between `r.choices` and the JSON `r.content` had the type
 * JSON, and cast every answer's choices, token ids and logprobs, to JSON text to test it (0.32
 * s of CPU a GRPO batch).
 */
const ANSWER_TYPED_MISSING = [
  'r.prompt_token_ids IS NULL',
  'r.choices[1].token_ids IS NULL',
  'r.choices[1].logprobs.content IS NULL',
  "CASE api WHEN 'messages' THEN r.content IS NULL WHEN 'responses' THEN r.output IS NULL ELSE r.choices IS NULL END",
];
/** Whether the answer has ANSWER_PATHS' path `i` (1-based), whose typed value is `value`. */
const there = (i: number, value: string) => `(${value} IS NOT NULL OR k[${i}] IS NOT NULL)`;

/**
 * Two halves of any relation of spans, by a hash of the span id (never NULL), that callsFrom
 * parses side by side: DuckDB scans a row group on one thread, and the spans of a batch, or of
 * a deriver's round, sit in one (122,880 rows), so their parse ran on one thread while the
 * other waited. The branches of a UNION ALL run on threads of their own, and the test of the
 * span id is pushed into the scan, which fetches a half's attributes alone: the bench's 8,192
 * fresh GRPO calls (`fresh_call_rows`, 6 runs each) 978-1,063 -> 832-864 ms median, the same
 * CPU. Four quarters on 2 cores cost a fifth more CPU for no less time.
 */
const SPAN_HALVES = ['hash(span_id) % 2 = 0', 'hash(span_id) % 2 = 1'];

/** A LIMIT of no limit: a bound that filters are not pushed across (callsFrom). */
const NO_LIMIT = '1000000000000000000';

/**
 * LLM calls, one row per span, in OpenAI chat format (messages with role, content, tool_calls,
 * tool_call_id), by dialect:
 *   0, 1. agl's gateway and agl's capture in the agent: the exact HTTP exchange (`agl.llm.request` / `.response`),
 *      by its API (`agl.llm.api`: OpenAI chat, completions, Responses; Anthropic Messages through the
 *      macros of anthropic-messages.ts);
 *   2. OpenTelemetry GenAI conventions: the documents `gen_ai.input.messages` & co. (parts, genai-messages.ts) as
 *      span attributes or on a `gen_ai.client.inference.operation.details` span event, the attributes first; an
 *      inference span with no content recorded (`gen_ai.operation.name` chat, text_completion or
 *      generate_content, content capture off) is a call too, with its model, usage and parameters;
 *   3. flattened attributes: OpenLLMetry `gen_ai.prompt.N.*`, OpenInference `llm.input_messages.N.*`;
 *      for Anthropic calls, OpenLLMetry's content as JSON block lists goes through the Messages macros,
 *      OpenInference's user turn with a `tool_call_id` (a tool result) is a tool message, Anthropic
 *      tool schemas and stop reasons read as chat's.
 * (4 and 5, GenAI log-record events, join logs to spans and live in the `llm_calls` view.)
 * Every dialect ends in `parameters` (the request's, agl_genai_parameters) and `extra_parts`.
 * Every parse of recorded text is wrapped in try(): a malformed body gives NULL columns, never
 * a failed commit.
 * The attributes are parsed once, below a LIMIT of no limit that no filter crosses: DuckDB
 * pushes the filters of a materialized CTE's readers into it when every reader filters, and the
 * dialects' filters on `f`, pushed down to where `f` is made, were pasted onto its definition:
 * every span's attributes parsed 33 times (a GRPO batch's 8,192 calls before the deriver: 11 of
 * 23 s of its calls in EXPLAIN ANALYZE). A copy of `parsed` read whole and unfiltered (`src`)
 * kept that off only while it stayed materialized, and a macro or view read back from the file
 * (a read-only open: `agl query --db`, exports, the GRPO batch of a file opened read-only) has
 * lost MATERIALIZED: its fresh_call_rows, which reads of llm_calls run while the deriver is
 * behind, took 372 ms for 615 spans against 178 ms (25,416 spans: 4.2 against 1.6 s). The
 * LIMIT needs no such copy, which held every call's answer a second time (a GRPO batch's 8,192
 * fresh calls: peak memory 1,134-1,143 -> 997-1,034 MB).
 * A span whose attributes are not JSON has no `f` (try) and no call,
 * so `spans` need not be tested with `readable` first, a parse of every span of its own; the
 * attributes are kept only where the GenAI dialects read them (not agl's own, whose
 * `agl.llm.response` is in `f`), so that `parsed` holds one copy of a call's answer.
 */
export const callsFrom = (spans: string, ownOnly = false) => `
WITH
parsed AS MATERIALIZED (${SPAN_HALVES.map(
  (half) => `SELECT * REPLACE (CASE WHEN f[16] IS NULL THEN attributes END AS attributes)
  FROM (SELECT *, try(${FIELDS}) AS f FROM ${spans} WHERE ${half} LIMIT ${NO_LIMIT})`,
).join('\nUNION ALL\n')}),
agl AS (
  SELECT *, f[16] AS api,
    try(json_extract(f[17], ['messages', 'prompt', 'instructions', 'input', 'tools', 'model', 'system'])) AS q,
    try(json_transform(f[18], '${JSON.stringify(ANSWER_STRUCTURE)}')) AS r
  FROM parsed WHERE f[16] IN ('chat', 'text_completion', 'responses', 'messages')
),
-- A list built from every choice's message (or every element's logprob) is the wildcard path's
-- only when each one had it: else that path is read, which leaves out the elements without.
agl_calls AS (
  SELECT ${SPAN_COLUMNS},
    coalesce(r.model->>'$', q[6]->>'$', coalesce(f[5], f[6], f[7])) AS model,
    CASE WHEN q IS NULL THEN NULL
      WHEN api = 'chat' THEN q[1]
      WHEN api = 'text_completion' THEN json_array(json_object('role', 'user', 'content', q[2]))
      WHEN api = 'messages' THEN agl_anthropic_input(q[7], q[1])
      ELSE to_json(list_concat(
        CASE WHEN (q[3]->>'$') IS NOT NULL THEN [json_object('role', 'system', 'content', q[3]->>'$')] ELSE [] END,
        CASE WHEN json_type(q[4]) = 'VARCHAR' THEN [json_object('role', 'user', 'content', q[4]->>'$')] ELSE try_cast(q[4] AS JSON[]) END))
    END AS input_messages,
    CASE api
      WHEN 'chat' THEN CASE WHEN ${there(7, 'r.choices')} THEN to_json(CASE WHEN list_count(messages) = len(r.choices) THEN messages
        ELSE try(json_extract(f[18], '$.choices[*].message')) END) END
      WHEN 'text_completion' THEN CASE WHEN ${there(7, 'r.choices')}
        THEN to_json(list_transform(try(json_extract_string(f[18], '$.choices[*].text')), lambda t: json_object('role', 'assistant', 'content', t))) END
      WHEN 'messages' THEN CASE WHEN ${there(9, 'r.content')} THEN to_json([agl_anthropic_assistant(agl_anthropic_blocks(coalesce(r.content, 'null')))]) END
      ELSE CASE WHEN ${there(8, 'r.output')} THEN coalesce(r.output, 'null') END
    END AS output_messages,
    CASE WHEN api = 'messages' THEN agl_anthropic_tools(q[5]) ELSE q[5] END AS tools,
    CASE WHEN ${there(1, 'r.prompt_token_ids')} THEN r.prompt_token_ids
      WHEN ${there(2, 'r.choices[1].prompt_token_ids')} THEN r.choices[1].prompt_token_ids
      WHEN ${there(3, 'r.provider_specific_fields.prompt_token_ids')} THEN r.provider_specific_fields.prompt_token_ids END AS prompt_token_ids,
    CASE WHEN ${there(4, 'r.choices[1].token_ids')} THEN r.choices[1].token_ids
      WHEN ${there(5, 'r.choices[1].provider_specific_fields.token_ids')} THEN r.choices[1].provider_specific_fields.token_ids END AS response_token_ids,
    CASE WHEN NOT ${there(6, 'r.choices[1].logprobs.content')} THEN r.choices[1].logprobs.token_logprobs
      WHEN list_count(logprobs) = len(logprobs) THEN logprobs
      ELSE TRY_CAST(try(json_extract(f[18], '$.choices[0].logprobs.content[*].logprob')) AS DOUBLE[])
    END AS response_logprobs,
    coalesce(TRY_CAST(coalesce(r.usage->>'prompt_tokens', r.usage->>'input_tokens') AS BIGINT)
      + CASE WHEN api = 'messages' THEN coalesce(TRY_CAST(r.usage->>'cache_read_input_tokens' AS BIGINT), 0) + coalesce(TRY_CAST(r.usage->>'cache_creation_input_tokens' AS BIGINT), 0) ELSE 0 END,
      TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT)) AS input_tokens,
    coalesce(TRY_CAST(coalesce(r.usage->>'completion_tokens', r.usage->>'output_tokens') AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT)) AS output_tokens,
    coalesce(r.id->>'$', f[14]) AS response_id,
    CASE WHEN api = 'messages' THEN agl_anthropic_finish(coalesce(r.stop_reason->>'$', try(f[15]->>0)))
      ELSE coalesce(r.choices[1].finish_reason->>'$', r.status->>'$', try(f[15]->>0)) END AS finish_reason,
    CASE WHEN f[26] = 'true' THEN 0 ELSE 1 END AS dialect,
    agl_genai_parameters(${PARAMETER_TEXTS}) AS parameters, NULL::JSON AS extra_parts
  FROM (SELECT *, list_transform(r.choices, lambda c: c.message) AS messages,
    coalesce(list_transform(r.choices[1].logprobs.content, lambda c: c.logprob), []) AS logprobs,
    CASE WHEN ${ANSWER_TYPED_MISSING.join(' OR ')}
      THEN try(json_type(f[18], [${ANSWER_PATHS.map((path) => `'${path}'`).join(', ')}])) END AS k
    FROM agl)
),
semconv_src AS (
  SELECT *, ${SEMCONV_DOCUMENTS} AS documents FROM parsed WHERE f IS NOT NULL AND f[16] IS NULL
),
semconv AS (
  SELECT *, CASE WHEN contains(events, '"${GENAI.operationDetails}"') THEN list_transform(
      list_filter(try_cast(events AS JSON[]), lambda g_e: (g_e->>'name') = '${GENAI.operationDetails}'), lambda g_e: g_e->'attributes') END AS details
  FROM semconv_src
  WHERE documents OR (f[27] IN ${INFERENCE_OPERATIONS} AND f[23] IS NULL AND f[24] IS NULL AND f[25] IS NULL)
),
semconv_docs AS (
  SELECT *, coalesce(f[19], details_input) AS input_doc, coalesce(f[20], details_output) AS output_doc,
    coalesce(f[21], details_system) AS system_doc, coalesce(f[22], details_tools) AS tools_doc
  FROM (SELECT *, ${detailsDocuments('coalesce(details, [])')} FROM semconv)
),
semconv_calls AS (
  SELECT ${SPAN_COLUMNS}, coalesce(f[5], f[6], f[7]) AS model,
    agl_genai_input(system_doc, input_doc) AS input_messages, agl_genai_output(output_doc) AS output_messages,
    CASE WHEN tools_doc IS NOT NULL THEN agl_genai_tools(tools_doc) END AS tools,
    NULL::INTEGER[], NULL::INTEGER[], NULL::DOUBLE[],
    TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT), f[14],
    agl_genai_finish(f[15], output_doc),
    2, agl_genai_parameters(${PARAMETER_TEXTS}), agl_genai_extra(system_doc, input_doc, output_doc)
  FROM semconv_docs
),
flat_src AS (
  SELECT *, lower(coalesce(f[1], f[2], f[3], f[4])) = 'anthropic' IS TRUE AS anthropic
  FROM semconv_src WHERE (f[23] IS NOT NULL OR f[24] IS NOT NULL OR f[25] IS NOT NULL) AND NOT documents
),
flat_pairs AS (
  SELECT s.trace_id, s.span_id, e.key, e.value FROM flat_src s, json_each(s.attributes) AS e
),
flat AS (
  SELECT trace_id, span_id, x['side'] AS side, CAST(x['idx'] AS INTEGER) AS idx, x['field'] AS field, value->>'$' AS value
  FROM (SELECT *, regexp_extract(key, '${FLAT_KEY}', ['side', 'idx', 'field']) AS x FROM flat_pairs)
  WHERE x['side'] <> ''
),
flat_tool_calls AS (
  SELECT trace_id, span_id, side, idx, list(json_object('id', id, 'type', 'function', 'function', json_object('name', name, 'arguments', arguments)) ORDER BY j) AS calls
  FROM (
    SELECT trace_id, span_id, side, idx, CAST(c['j'] AS INTEGER) AS j,
      max(value) FILTER (WHERE c['f'] = 'id') AS id, max(value) FILTER (WHERE c['f'] = 'name') AS name,
      max(value) FILTER (WHERE c['f'] = 'arguments') AS arguments
    FROM (SELECT *, regexp_extract(field, '${FLAT_TOOL_CALL}', ['j', 'f']) AS c FROM flat WHERE field LIKE 'tool\\_calls.%' ESCAPE '\\')
    WHERE c['j'] <> '' GROUP BY ALL
  ) GROUP BY ALL
),
flat_items AS (
  SELECT trace_id, span_id, side, idx,
    max(value) FILTER (WHERE field = 'role') AS role, max(value) FILTER (WHERE field = 'content') AS content,
    max(value) FILTER (WHERE field = 'tool_call_id') AS tool_call_id, max(value) FILTER (WHERE field = 'finish_reason') AS finish_reason,
    max(value) FILTER (WHERE field = 'json_schema') AS json_schema, max(value) FILTER (WHERE field = 'name') AS name,
    max(value) FILTER (WHERE field = 'description') AS description,
    max(value) FILTER (WHERE field IN ('parameters', 'input_schema')) AS parameters
  FROM flat GROUP BY ALL
),
-- The messages of one item: role and content, with tool_call_id and tool_calls only where present;
-- an Anthropic turn written as its block list, the chat messages the Messages macros make of it.
flat_message_items AS (
  SELECT i.*, s.anthropic, CASE
      WHEN s.anthropic AND c.calls IS NULL AND json_type(try(json(i.content))) = 'ARRAY'
        THEN agl_anthropic_turn(i.role, agl_anthropic_blocks(json(i.content)))
      WHEN i.tool_call_id IS NULL AND c.calls IS NULL THEN [json_object('role', i.role, 'content', i.content)]
      ELSE [json_merge_patch(json_object('role', CASE WHEN s.anthropic AND i.role = 'user' AND i.tool_call_id IS NOT NULL THEN 'tool' ELSE i.role END,
        'content', i.content), json_object('tool_call_id', i.tool_call_id, 'tool_calls', to_json(c.calls)))] END AS messages
  FROM flat_items i JOIN (SELECT trace_id, span_id, anthropic FROM flat_src) s USING (trace_id, span_id)
    LEFT JOIN flat_tool_calls c USING (trace_id, span_id, side, idx)
),
flat_messages AS (
  SELECT trace_id, span_id,
    to_json(flatten(list(messages ORDER BY idx) FILTER (WHERE side IN ('gen_ai.prompt', 'llm.input_messages')))) AS input_messages,
    to_json(flatten(list(messages ORDER BY idx) FILTER (WHERE side IN ('gen_ai.completion', 'llm.output_messages')))) AS output_messages,
    nullif(agl_anthropic_tools(to_json(list(CASE WHEN side = 'llm.tools' THEN try(json(json_schema))
      ELSE json_object('type', 'function', 'function', json_object('name', name, 'description', description, 'parameters', try(json(parameters)))) END
      ORDER BY idx) FILTER (WHERE side IN ('llm.tools', 'llm.request.functions')))), '[]'::JSON) AS tools,
    min(finish_reason ORDER BY idx) FILTER (WHERE side = 'gen_ai.completion') AS finish_reason
  FROM flat_message_items
  GROUP BY trace_id, span_id
),
flat_calls AS (
  SELECT ${SPAN_COLUMNS}, coalesce(f[5], f[6], f[7]) AS model,
    m.input_messages, m.output_messages, m.tools,
    NULL::INTEGER[], NULL::INTEGER[], NULL::DOUBLE[],
    TRY_CAST(coalesce(f[8], f[9], f[10]) AS BIGINT), TRY_CAST(coalesce(f[11], f[12], f[13]) AS BIGINT), f[14],
    CASE WHEN s.anthropic THEN agl_anthropic_finish(coalesce(m.finish_reason, try(f[15]->>0))) ELSE coalesce(m.finish_reason, try(f[15]->>0)) END,
    3, agl_genai_parameters(${PARAMETER_TEXTS}), NULL::JSON
  FROM flat_messages m JOIN flat_src s USING (trace_id, span_id)
)
SELECT * FROM agl_calls${ownOnly ? '' : ' UNION ALL SELECT * FROM semconv_calls UNION ALL SELECT * FROM flat_calls'}`;

/**
 * Whether a span's attributes may hold `key`: its text does. A test of the text skips the parse
 * of the JSON for the spans that cannot (most spans, for the rewards and agents): a GRPO batch's
 * spans not derived yet are calls of 20 KB of token ids each, and each read of them parsed every
 * one (DuckDB inlines the CTEs of a view or macro, so several times per read). Keys are JSON text
 * as agl writes it, with no escapes in these names. A text tested starts with the key's first
 * letter, not its opening quote: `contains` looks for its first character, and quotes are
 * everywhere in a call's answer (the agents' test of 9,216 spans, 123 MB: 0.31 -> 0.13 s of CPU).
 */
const mayHave = (key: string) => `contains(attributes, '${key}"')`;

const REWARD_KEY = 'agentlightning.reward.0.value';
const AGENT_KEYS = [
  'agent.name',
  'gen_ai.agent.name',
  'openinference.span.kind',
  'agentlightning.operation.name',
  'langchain.run_type',
];
/** Keys one of which the attributes of a span that names an agent end in (`agent.name` ends both agent name keys). */
const AGENT_KEY_ENDS = ['agent.name', 'openinference.span.kind', 'agentlightning.operation.name', 'langchain.run_type'];

/**
 * A `gen_ai.evaluation.result`'s reward columns from its attributes `a`: the evaluation's name,
 * score, explanation as the feedback text, source `evaluation`, and its label.
 */
const evaluationColumns = (a: string) => `coalesce(${a}->>'gen_ai.evaluation.name', 'evaluation') AS name,
  TRY_CAST(${a}->>'gen_ai.evaluation.score.value' AS DOUBLE) AS value`;
const evaluationText = (a: string) => `${a}->>'gen_ai.evaluation.explanation' AS feedback, 'evaluation' AS source,
  ${a}->>'gen_ai.evaluation.score.label' AS label`;

/** Whether a span (its events) may hold a `gen_ai.evaluation.result`. */
const EVALUATED = `contains(events, '"${GENAI.evaluationResult}"')`;

/**
 * The `gen_ai.evaluation.result` span events of `spans`: rewards of the span they are on, the
 * call evaluated, dated at its end as feedback is (so triplet credit and the final-reward
 * filters give them to that call). A call's first evaluation is its primary reward, the others
 * are not (two primaries would be credited to two calls).
 */
export const evaluationsFrom = (spans: string) => `
SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, end_time AS time, ${evaluationColumns('e.a')},
  e.i = 1 AS is_primary, ${evaluationText('e.a')}
FROM (
  SELECT *, unnest(list_transform(list_filter(try_cast(events AS JSON[]), lambda g_e: (g_e->>'name') = '${GENAI.evaluationResult}'),
    lambda g_e, g_i: struct_pack(a := g_e->'attributes', i := g_i))) AS e
  FROM ${spans} WHERE ${EVALUATED}
)`;

/**
 * Agent Lightning's reward spans: `agentlightning.reward.<i>.name/.value`, and v0.2's one reward
 * per span; each with the span's feedback text and source (one per span, on each of its rewards);
 * then the GenAI evaluation results on spans (those of `evaluated`, the same spans, or fewer
 * where a test of their events has to come first: FRESH_EVALUATED).
 */
export const rewardsFrom = (spans: string, evaluated = spans) => `
SELECT any_value(s.rollout_id) AS rollout_id, any_value(s.attempt_id) AS attempt_id, s.trace_id, s.span_id, any_value(s.parent_id) AS parent_id,
  any_value(s.sequence_id) AS sequence_id, any_value(s.start_time) AS time,
  max(e.value->>'$') FILTER (WHERE r.field = 'name') AS name, TRY_CAST(max(e.value->>'$') FILTER (WHERE r.field = 'value') AS DOUBLE) AS value,
  r.i = 0 AS is_primary, any_value(s.feedback) AS feedback, any_value(s.source) AS source, NULL::VARCHAR AS label
FROM (SELECT *, ${rewardTextOf('r')} FROM ${spans} r WHERE ${mayHave(REWARD_KEY)} AND (attributes->>'${REWARD_KEY}') IS NOT NULL) s, json_each(s.attributes) AS e,
  (SELECT regexp_extract(e.key, '^agentlightning\\.reward\\.(\\d+)\\.(name|value)$', ['i', 'field']) AS x) t,
  (SELECT TRY_CAST(nullif(t.x['i'], '') AS INTEGER) AS i, t.x['field'] AS field) r
WHERE r.i IS NOT NULL
GROUP BY s.trace_id, s.span_id, r.i
HAVING count(*) FILTER (WHERE r.field = 'value') > 0
UNION ALL
SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, sequence_id, start_time, 'primary', TRY_CAST(attributes->>'reward' AS DOUBLE), true,
  ${rewardTextOf('r')}, NULL
FROM ${spans} r WHERE name = 'agentlightning.reward' AND (attributes->>'reward') IS NOT NULL
UNION ALL
${evaluationsFrom(evaluated)}`;

/** The agent a span names, in order of preference (one parse of the attributes, of the spans that may name one). */
export const agentsFrom = (spans: string) => `
WITH named AS MATERIALIZED (
  SELECT trace_id, span_id, name, json_extract_string(attributes, [${AGENT_KEYS.map((k) => `'${k}'`).join(', ')}]) AS a
  FROM ${spans} WHERE ${AGENT_KEY_ENDS.map(mayHave).join(' OR ')}
)
SELECT trace_id, span_id, agent_name FROM (
  SELECT trace_id, span_id, coalesce(a[1], a[2], CASE WHEN a[3] = 'AGENT' THEN name END, a[4], CASE WHEN a[5] = 'chain' THEN name END) AS agent_name FROM named
) WHERE agent_name IS NOT NULL`;

/**
 * The spans the deriver left out because their attributes are not JSON that DuckDB reads (a lone
 * surrogate stored before agl made strings valid where they enter): deriving one failed the whole round,
 * and reading one failed every view and export. `agl export` names them.
 */
export const DERIVED_SKIPPED_DDL = `
CREATE TABLE derived_skipped (rollout_id VARCHAR, trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL);`;

/** Whether a span's attributes can be read (the derived rows and views parse nothing else of a span). */
export const readable = (attributes = 'attributes') => `json_valid(${attributes})`;

export const WATERMARK = "(SELECT CAST(value AS BIGINT) FROM agl_meta WHERE key = 'derived_through')";
/** The stored spans not derived yet, but unreadable ones (the view `underived_spans`: DERIVED_VIEWS_SQL). */
const UNDERIVED = `(SELECT * FROM underived_spans WHERE ${readable()})`;

/** The spans left out of every derived row: those the deriver skipped, and unreadable ones not derived yet. */
export const UNREADABLE_SPANS_SQL = `SELECT rollout_id, span_id FROM derived_skipped
  UNION ALL SELECT rollout_id, span_id FROM underived_spans WHERE NOT ${readable()}`;

/**
 * Whether a log record (of `logs`, or aliased `t.`) is a GenAI log event tied to a span: what
 * llm_calls and rewards read from log records (LOG_EVENT_VIEWS).
 */
export const isLogEvent = (t = '') =>
  `coalesce(${t}event_name, ${t}attributes->>'event.name') LIKE 'gen\\_ai.%' ESCAPE '\\' AND ${t}span_id IS NOT NULL`;

/**
 * Every GenAI log event of `logs` has a commit_seq above this: the deriver moves it past the log
 * records that hold none (LOG_EVENTS_AFTER_SQL), and it stops before the first that does.
 */
const LOG_EVENTS_AFTER =
  "(SELECT coalesce(max(CAST(value AS BIGINT)), -1) FROM agl_meta WHERE key = 'log_events_after')";

/**
 * The view `genai_log_events`: the GenAI log events stored, a look at the log records after
 * LOG_EVENTS_AFTER alone (DuckDB skips the row groups before it). While it is empty, reads plan
 * without the SQL that reads calls and evaluations from log records (NO_LOG_EVENTS_SCHEMA).
 */
const GENAI_LOG_EVENTS_VIEW = `CREATE OR REPLACE VIEW genai_log_events AS
SELECT * FROM logs WHERE commit_seq > ${LOG_EVENTS_AFTER} AND ${isLogEvent()}`;

/**
 * One statement of a deriver round: LOG_EVENTS_AFTER moves to the last log record while no GenAI
 * log event is stored. Never back: after a move deleted the file's log records, their numbers
 * are not used again (nextCommitSeqSql).
 */
export const LOG_EVENTS_AFTER_SQL = `INSERT OR REPLACE INTO agl_meta
SELECT 'log_events_after', CAST(greatest(${LOG_EVENTS_AFTER}, coalesce(max(commit_seq), -1)) AS VARCHAR) FROM logs
HAVING NOT EXISTS (SELECT 1 FROM genai_log_events)`;

/**
 * Whether derived_calls holds the default triplet answer of every call: every span derived, by
 * this agl's SQL, and no GenAI log events (calls read from logs are in the llm_calls view only).
 */
const CREDITED_CALLS_READY_VIEW = `CREATE OR REPLACE VIEW credited_calls_ready AS
SELECT ${WATERMARK} >= (SELECT coalesce(max(commit_seq), -1) FROM spans)
  AND (SELECT value FROM agl_meta WHERE key = 'derived_version') = '${DERIVED_VERSION}'
  AND NOT EXISTS (SELECT 1 FROM genai_log_events) AS ready`;
export const CREDITED_CALLS_READY_SQL = 'SELECT ready FROM credited_calls_ready';

/** The stored calls, then `fresh`: the calls of the spans after the watermark. */
const callRows = (fresh: string) =>
  `SELECT * EXCLUDE (group_id, ${CREDIT_COLUMNS}) FROM derived_calls UNION ALL BY NAME SELECT * FROM ${fresh}`;

/** The fresh-row macros: what the store's queries may call besides its tables and views (read-only-sql.ts). */
export const FRESH_ROW_MACROS = [
  'fresh_call_rows',
  'fresh_reward_rows',
  'fresh_agent_spans',
  'fresh_own_call_rows',
] as const;
/** The last, fresh_call_rows of agl's own calls alone (callsFrom's `ownOnly`), for keyed reads that hold no other (ownCallsOnlySql). */
const [FRESH_CALLS, FRESH_REWARDS, FRESH_AGENTS, FRESH_OWN_CALLS] = FRESH_ROW_MACROS;

/** Every span not derived yet, derived now: the fresh-row macros' arguments for any keys. */
const ANY_KEYS = 'NULL, NULL, NULL';

/** The calls of every span not derived yet, derived now. */
export const ALL_FRESH_CALLS = `SELECT * FROM ${FRESH_CALLS}(${ANY_KEYS})`;

/**
 * llm_call_rows for a query that reads the rows several times, as llm_calls does five: the CTE
 * `fresh_calls` computes the calls of the spans not derived yet once, not at every read
 * (`SELECT count(*) FROM llm_calls` went from 150-190 to 50-70 ms on a store of 3,200 spans, from
 * 26-30 to 12-15 s on one of 1,200,000 spans none of them derived), and CALL_ROWS, pasted where
 * the rows are read, reads the stored calls in place: only the columns a query needs and only
 * the rows its filter keeps. As a CTE of its own, DuckDB materialized it (a CTE read more than
 * once is, and a view read back from the file forgets NOT MATERIALIZED): a copy of every stored
 * call, messages and token ids included, for a read of one rollout's six.
 */
export const FRESH_CALLS_CTE = `fresh_calls AS MATERIALIZED (${ALL_FRESH_CALLS})`;

/**
 * The schema of `llm_calls` over a table `fresh_calls` that the read makes first, in its own
 * snapshot (FRESH_CALLS_TABLE_SQL, a temporary table): a read of the view while spans wait for
 * the deriver (src/store/query.ts). The view's own CTE computes the same rows, but DuckDB does
 * not prune the columns of a view below a materialized CTE: a count of a soak's 39,148 stored
 * calls with one span waiting read every column of every call, messages and token ids, and held
 * them in the other dialects' dedup window (445 ms and 194 MB more RSS, against 30-59 ms and
 * 15-19 MB with none waiting). Its `fresh_calls` view, which the temporary table hides, is only
 * there for the view to bind.
 */
export const FRESH_CALLS_SCHEMA = 'fresh_calls_table';
/** The read's table of the calls of every span not derived yet (FRESH_CALLS_SCHEMA). */
export const FRESH_CALLS_TABLE_SQL = `CREATE TEMP TABLE fresh_calls AS ${ALL_FRESH_CALLS}`;
/** FRESH_CALLS_CTE of the spans that `spans` select alone (as derivedRowsOf reads them). */
export const freshCallsCte = (spans: SpanSelection) =>
  `fresh_calls AS MATERIALIZED (SELECT * FROM ${FRESH_CALLS}(${spans.fresh}))`;
export const CALL_ROWS = `(${callRows('fresh_calls')})`;

/**
 * The views over what is stored: the spans not derived yet (DuckDB skips the row groups before
 * the watermark), the GenAI log events, and whether the triplets of derived_calls are complete.
 * The span directory defines its own under the same names (src/store/fleet-views.ts), over every
 * server's spans and log records.
 */
export const STORED_VIEWS_SQL = `
CREATE OR REPLACE VIEW underived_spans AS SELECT * FROM spans WHERE commit_seq > ${WATERMARK};
${GENAI_LOG_EVENTS_VIEW};
${CREDITED_CALLS_READY_VIEW};`;

/**
 * The views of what is read from GenAI log events, `log_event_calls` (llm_calls rows:
 * src/sql/views.ts) and `log_event_rewards`. The schema NO_LOG_EVENTS_SCHEMA defines them as no
 * rows; a read looks them up there first while no GenAI log event is stored (src/store/query.ts).
 * Views, not table macros: a view names a macro of `main` before one of the search path, a view
 * or table of the search path before one of `main`.
 */
export const LOG_EVENT_VIEWS = ['log_event_calls', 'log_event_rewards'] as const;
const [LOG_EVENT_CALLS, LOG_EVENT_REWARDS] = LOG_EVENT_VIEWS;

/**
 * The `gen_ai.evaluation.result` log records, as reward rows of the span they are tied to by
 * trace and span id (the call evaluated; read when read, as the calls of log records are): dated
 * at the call's end, the first of a call's evaluations its primary reward (evaluationsFrom). A
 * record whose span has not arrived yet is dated and attributed by itself.
 */
export const LOG_EVENT_REWARDS_SQL = `CREATE OR REPLACE VIEW ${LOG_EVENT_REWARDS} AS
SELECT coalesce(s.rollout_id, l.rollout_id) AS rollout_id, coalesce(s.attempt_id, l.attempt_id) AS attempt_id,
  l.trace_id, l.span_id, s.parent_id, s.sequence_id, coalesce(s.end_time, l.time) AS time, ${evaluationColumns('l.attributes')},
  row_number() OVER (PARTITION BY l.trace_id, l.span_id ORDER BY l.time, l.commit_seq) = 1 AS is_primary, ${evaluationText('l.attributes')}
FROM logs l LEFT JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id
WHERE coalesce(l.event_name, l.attributes->>'event.name') = '${GENAI.evaluationResult}' AND l.trace_id IS NOT NULL AND l.span_id IS NOT NULL;`;

/**
 * The schema of the log-event views as no rows, of the shapes of `main`'s derived_calls and
 * derived_rewards (named plainly, a read through the span directory would bind its files for
 * no row). Planning the calls of log events expands the GenAI macros (genai-messages.ts): most
 * of the planning of one rollout's llm_calls.
 */
export const NO_LOG_EVENTS_SCHEMA = 'no_log_events';
export const NO_LOG_EVENTS_SQL = `CREATE SCHEMA IF NOT EXISTS ${NO_LOG_EVENTS_SCHEMA};
CREATE OR REPLACE VIEW ${NO_LOG_EVENTS_SCHEMA}.${LOG_EVENT_CALLS} AS
  SELECT * EXCLUDE (group_id, ${CREDIT_COLUMNS}) FROM main.derived_calls WHERE false;
CREATE OR REPLACE VIEW ${NO_LOG_EVENTS_SCHEMA}.${LOG_EVENT_REWARDS} AS SELECT * FROM main.derived_rewards WHERE false;`;

/** Whether a read may look names up in NO_LOG_EVENTS_SCHEMA first: no GenAI log event is stored. */
export const NO_LOG_EVENTS = 'NOT EXISTS (SELECT 1 FROM genai_log_events)';

/** The stored calls alone, as llm_call_rows gives them. */
export const STORED_CALL_ROWS = `(SELECT * EXCLUDE (group_id, ${CREDIT_COLUMNS}) FROM derived_calls)`;

/**
 * The schema of the views over the derived tables alone (DERIVED_ONLY_VIEWS_SQL), which a read
 * looks names up in first while no span waits for the deriver (src/store/query.ts): then they
 * hold what the file's views hold, and DuckDB plans them without the SQL that derives spans,
 * most of the planning of a read of a few rows (one rollout's llm_calls: 40-60 of 65-90 ms
 * CPU on a loaded machine).
 */
export const DERIVED_ONLY_SCHEMA = 'derived_only';

/**
 * Whether every stored span is derived (or skipped as unreadable): the derived-only views are
 * complete. DuckDB skips the row groups before the watermark: a look at the last few.
 */
export const CAUGHT_UP = 'NOT EXISTS (SELECT 1 FROM underived_spans)';

/**
 * The schema of llm_calls as agl's own calls alone (derivedOnlyViewsSql), which a read looks
 * names up in first while OWN_CALLS_ONLY holds besides CAUGHT_UP and NO_LOG_EVENTS: planned
 * without the other dialects' calls, whose anti-joins build over every stored call (a third of
 * one rollout's llm_calls through a span directory, bench/spans-dir.ts).
 */
export const OWN_CALLS_SCHEMA = 'own_calls_only';

/** Whether every stored call is agl's own (its capture, its gateway). DuckDB skips the row groups of none by their statistics. */
export const OWN_CALLS_ONLY = 'NOT EXISTS (SELECT 1 FROM main.derived_calls WHERE dialect > 1)';

/** The derived rows' views over the derived tables alone. */
export const STORED_DERIVED_VIEWS_SQL = `
CREATE OR REPLACE VIEW llm_call_rows AS SELECT * FROM ${STORED_CALL_ROWS};
CREATE OR REPLACE VIEW reward_rows AS SELECT * FROM derived_rewards UNION ALL BY NAME SELECT * FROM ${LOG_EVENT_REWARDS};
CREATE OR REPLACE VIEW agent_spans AS SELECT * FROM derived_agents;`;

/** The parameters of the fresh-row macros: lists of ids, each NULL for any (SpanKeys). */
const KEY_PARAMETERS = 'rollout_ids, attempt_ids, trace_ids';
/**
 * A span's ids among the keys' lists, each tested by a hash join: `list_contains` compared a span
 * with the list's elements one by one (1,024 rollout ids over 1,000,000 rows: 1.4 s, against 54
 * ms; one id, 28 against 6-13 ms).
 */
const KEYS_MATCH = `(rollout_ids IS NULL OR rollout_id IN (SELECT unnest(rollout_ids)))
  AND (attempt_ids IS NULL OR attempt_id IN (SELECT unnest(attempt_ids)))
  AND (trace_ids IS NULL OR trace_id IN (SELECT unnest(trace_ids)))`;
const freshSpans = (where: string) => `(SELECT * FROM underived_spans WHERE ${where} AND ${readable()})`;
/**
 * The spans of freshSpans(KEYS_MATCH) that may hold evaluation results, their events tested
 * before their attributes are parsed: in one expression, as DuckDB runs a filter on the
 * attributes alone before one on the events (json_valid parsed every span's attributes, 0.3 s
 * of CPU in each read of a GRPO batch's rewards).
 */
const FRESH_EVALUATED = `(SELECT * FROM underived_spans WHERE ${KEYS_MATCH} AND CASE WHEN ${EVALUATED} THEN ${readable()} ELSE false END)`;

/**
 * The rows of the spans not derived yet that match the keys, derived now: the table macros
 * `fresh_call_rows`, `fresh_reward_rows` and `fresh_agent_spans` (agents: those of the matching
 * spans' traces), which the views and derivedRowsOf read. The keys are applied before anything
 * is derived, so a read of a few rollouts parses their own spans, not every span not derived yet.
 * The schema derived_only defines the same macros as no rows (STORED_FRESH_MACROS_SQL): a
 * query that names them is planned without the SQL that derives spans while all are derived.
 */
export const FRESH_MACROS_SQL = `
CREATE OR REPLACE MACRO ${FRESH_CALLS}(${KEY_PARAMETERS}) AS TABLE ${callsFrom(`(SELECT * FROM underived_spans WHERE ${KEYS_MATCH})`)};
CREATE OR REPLACE MACRO ${FRESH_OWN_CALLS}(${KEY_PARAMETERS}) AS TABLE ${callsFrom(`(SELECT * FROM underived_spans WHERE ${KEYS_MATCH})`, true)};
CREATE OR REPLACE MACRO ${FRESH_REWARDS}(${KEY_PARAMETERS}) AS TABLE ${rewardsFrom(freshSpans(KEYS_MATCH), FRESH_EVALUATED)};
CREATE OR REPLACE MACRO ${FRESH_AGENTS}(${KEY_PARAMETERS}) AS TABLE
  ${agentsFrom(freshSpans(`trace_id IN (SELECT trace_id FROM spans WHERE ${KEYS_MATCH})`))};`;

/**
 * The fresh-row macros of the schema derived_only: the derived tables' shapes, no rows. Of `main`'s
 * tables: named plainly, the span directory's derived-only schema would bind its files for no row.
 */
export const STORED_FRESH_MACROS_SQL = `
CREATE OR REPLACE MACRO ${FRESH_CALLS}(${KEY_PARAMETERS}) AS TABLE SELECT * EXCLUDE (group_id, ${CREDIT_COLUMNS}) FROM main.derived_calls WHERE false;
CREATE OR REPLACE MACRO ${FRESH_OWN_CALLS}(${KEY_PARAMETERS}) AS TABLE SELECT * EXCLUDE (group_id, ${CREDIT_COLUMNS}) FROM main.derived_calls WHERE false;
CREATE OR REPLACE MACRO ${FRESH_REWARDS}(${KEY_PARAMETERS}) AS TABLE SELECT * FROM main.derived_rewards WHERE false;
CREATE OR REPLACE MACRO ${FRESH_AGENTS}(${KEY_PARAMETERS}) AS TABLE SELECT * FROM main.derived_agents WHERE false;`;

/**
 * Every derived row: what the deriver stored, and the spans after its watermark derived now.
 * Written over `derived_*` and `underived_spans`, which the span directory's views replace.
 */
export const DERIVED_VIEWS_SQL = `${FRESH_MACROS_SQL}
CREATE OR REPLACE VIEW llm_call_rows AS ${callRows(`${FRESH_CALLS}(${ANY_KEYS})`)};
CREATE OR REPLACE VIEW reward_rows AS SELECT * FROM derived_rewards UNION ALL BY NAME SELECT * FROM ${FRESH_REWARDS}(${ANY_KEYS})
  UNION ALL BY NAME SELECT * FROM ${LOG_EVENT_REWARDS};
CREATE OR REPLACE VIEW agent_spans AS SELECT * FROM derived_agents UNION ALL (${agentsFrom(UNDERIVED)});`;

/** Spans by their ids: each list given restricts them to its ids; none given, every span. */
export interface SpanKeys {
  readonly rolloutIds?: readonly string[];
  readonly attemptIds?: readonly string[];
  readonly traceIds?: readonly string[];
}

/** Spans selected in SQL: the condition on a row's key columns, and the fresh-row macros' arguments. */
export interface SpanSelection {
  readonly condition: string;
  readonly fresh: string;
}

const KEY_COLUMNS = [
  ['rolloutIds', 'rollout_id'],
  ['attemptIds', 'attempt_id'],
  ['traceIds', 'trace_id'],
] as const;

/** The fresh-row macros' arguments for `keys` (ANY_KEYS for none). */
function freshKeys(keys: SpanKeys): string {
  return KEY_COLUMNS.map(([key]) => {
    const ids = keys[key];
    return ids === undefined ? 'NULL' : `[${ids.map(sqlText).join(', ')}]::VARCHAR[]`;
  }).join(', ');
}

/** The SQL condition that `keys` select spans (or derived rows) by. */
export function spanKeysCondition(keys: SpanKeys): string {
  const terms = KEY_COLUMNS.flatMap(([key, column]) => {
    const ids = keys[key];
    if (ids === undefined) return [];
    return [ids.length === 0 ? 'false' : `${column} IN (${ids.map(sqlText).join(', ')})`];
  });
  return terms.length === 0 ? 'true' : terms.join(' AND ');
}

/**
 * The spans of the rollouts whose ids the relation `ids` (its column rollout_id) holds: a batch
 * names its 1,024 rollouts once, in a CTE, where lists of literals in each condition and macro
 * call cost 0.35 s of planning per batch, much of it copies of the lists.
 */
export const rolloutsIn = (ids: string): SpanSelection => ({
  condition: `rollout_id IN (SELECT rollout_id FROM ${ids})`,
  fresh: `(SELECT list(rollout_id) FROM ${ids}), NULL, NULL`,
});

const selectionOf = (spans: SpanKeys | SpanSelection): SpanSelection =>
  'condition' in spans ? spans : { condition: spanKeysCondition(spans), fresh: freshKeys(spans) };

/**
 * What `llm_call_rows`, `reward_rows` and `agent_spans` hold for the spans that `spans` select
 * alone (agents are those of the selected spans' traces): the dashboard's pages, the judge, the
 * feedback route and a GRPO batch read a few rollouts this way. The spans not derived yet come
 * from the fresh-row macros, so that while every span is derived the query is planned without
 * their SQL.
 */
export function derivedRowsOf(
  spans: SpanKeys | SpanSelection,
  ownCallsOnly = false,
): { calls: string; rewards: string; agents: string } {
  const { condition, fresh } = selectionOf(spans);
  return {
    calls: `SELECT * FROM ${STORED_CALL_ROWS} WHERE ${condition} UNION ALL BY NAME SELECT * FROM ${ownCallsOnly ? FRESH_OWN_CALLS : FRESH_CALLS}(${fresh})`,
    rewards: `SELECT * FROM derived_rewards WHERE ${condition} UNION ALL BY NAME SELECT * FROM ${FRESH_REWARDS}(${fresh})
      UNION ALL BY NAME SELECT * FROM ${LOG_EVENT_REWARDS} WHERE ${condition}`,
    agents: `SELECT * FROM derived_agents WHERE trace_id IN (SELECT trace_id FROM spans WHERE ${condition})
      UNION ALL SELECT * FROM ${FRESH_AGENTS}(${fresh})`,
  };
}

/**
 * Whether every call of the spans that `keys` select is agl's own (its capture, its gateway): no
 * stored call of theirs is another dialect's, none of them not derived yet may be one
 * (MAY_BE_OTHER_CALL), and no GenAI log event is stored. Then llm_calls of those spans is
 * planned without the SQL of the other dialects (llmCallsOfKeys): a feedback on a gateway call
 * looks up the attempt's last call, twelve times a second in the soak, in 136 ms (planning,
 * mostly) over a soak's file with spans waiting, in 71 ms so.
 */
export const ownCallsOnlySql = (keys: SpanKeys) => {
  const condition = spanKeysCondition(keys);
  return `SELECT NOT EXISTS (SELECT 1 FROM underived_spans WHERE ${condition} AND ${MAY_BE_OTHER_CALL})
    AND NOT EXISTS (SELECT 1 FROM derived_calls WHERE ${condition} AND dialect > 1)
    AND NOT EXISTS (SELECT 1 FROM genai_log_events) AS own_only`;
};

/**
 * Whether a span's text may make a call of another dialect than agl's (callsFrom's semconv and
 * flat branches): not agl's own call, and it names the GenAI documents, a flattened first
 * message, an inference operation or has an operation.details event. Tested on the text, the
 * operation name parsed only where its key is: agl's own tool and agent spans name GenAI keys
 * too (`gen_ai.operation.name` `execute_tool`, `gen_ai.request.model`), and make no call.
 */
const fieldKey = (i: number) => SPAN_FIELD_KEYS[i - 1];
const MAY_BE_OTHER_CALL = `NOT ${mayHave(ATTR.llmApi)} AND (${[19, 20, 23, 24, 25].map((i) => mayHave(fieldKey(i))).join(' OR ')}
  OR contains(events, '"${GENAI.operationDetails}"')
  OR CASE WHEN ${mayHave(fieldKey(27))} THEN try(attributes->>'${fieldKey(27)}') IN ${INFERENCE_OPERATIONS} ELSE false END)`;

/**
 * The call rows of the spans that `spans` select, as llm_call_rows holds them: the stored ones
 * read in place, those of the spans not derived yet from the CTE `fresh_calls` (freshCallsCte),
 * derived once however often a statement reads them.
 */
export const selectedCallRows = (spans: SpanSelection) =>
  `(SELECT * FROM ${STORED_CALL_ROWS} WHERE ${spans.condition} UNION ALL BY NAME SELECT * FROM fresh_calls)`;
