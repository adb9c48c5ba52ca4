/**
 * OpenTelemetry's GenAI messages (semantic conventions 1.37 and later, now
 * open-telemetry/semantic-conventions-genai) in OpenAI chat shape, as SQL macros that the
 * derivation of llm_calls (derived.ts, dialect 2) and the calls read from log records
 * (views.ts) call. The documents are `gen_ai.input.messages`, `gen_ai.output.messages`,
 * `gen_ai.system_instructions` and `gen_ai.tool.definitions`, whether they came as span
 * attributes, on a `gen_ai.client.inference.operation.details` span event or log record, as JSON
 * text or as structured values: each macro takes the document as text (`->>'$'` of a JSON value
 * gives a string's own text and any other value's JSON).
 *
 * A message is a role and a list of parts:
 * - `text` parts are the content (joined); with media among them, the content is OpenAI's list of
 *   content parts: `uri` and `blob` images as `image_url` (a blob as a data URL), wav and mp3
 *   `blob` audio as `input_audio`, a `file` with an id as `file`;
 * - `tool_call` parts are the message's `tool_calls` (arguments as JSON text);
 * - each `tool_call_response` part is a tool message of its own, before the rest of its turn;
 * - `reasoning` parts are `reasoning_content` (the field vLLM, DeepSeek and chat templates use).
 * The finish reason is the provider's (`gen_ai.response.finish_reasons`), else the first output
 * message's, whose `tool_call` reads as chat's `tool_calls`.
 * System instructions are the first message, unless the input holds that very system message
 * already (@opentelemetry/instrumentation-openai records the Responses API's instructions both ways).
 * Every other part (video, a uri to audio, a server tool call, a vendor's own type, anything
 * that is no object) is kept as it came in `extra_parts`, with where it was: never dropped.
 */

import { GENAI } from '../api/semconv.js';

/** The part types chat messages hold beside content parts (agl_genai_content_part). */
const HELD_TYPES = "('text', 'reasoning', 'tool_call', 'tool_call_response')";

/**
 * The request parameters in OpenAI's names, from the GenAI request attributes:
 * [name, attribute, SQL type of its text].
 */
const PARAMETERS: [string, string, string][] = [
  ['temperature', 'gen_ai.request.temperature', 'DOUBLE'],
  ['top_p', 'gen_ai.request.top_p', 'DOUBLE'],
  ['top_k', 'gen_ai.request.top_k', 'DOUBLE'],
  ['max_tokens', 'gen_ai.request.max_tokens', 'BIGINT'],
  ['frequency_penalty', 'gen_ai.request.frequency_penalty', 'DOUBLE'],
  ['presence_penalty', 'gen_ai.request.presence_penalty', 'DOUBLE'],
  ['seed', 'gen_ai.request.seed', 'BIGINT'],
  ['stop', 'gen_ai.request.stop_sequences', 'JSON'],
  ['n', 'gen_ai.request.choice.count', 'BIGINT'],
  ['encoding_formats', 'gen_ai.request.encoding_formats', 'JSON'],
  ['stream', 'gen_ai.request.stream', 'BOOLEAN'],
  ['reasoning_effort', 'gen_ai.request.reasoning.level', 'VARCHAR'],
  ['output_type', 'gen_ai.output.type', 'VARCHAR'],
];
/**
 * The attributes agl_genai_parameters takes the text of, in order: the GenAI request attributes,
 * then OpenInference's `llm.invocation_parameters` (the provider's own, a JSON text).
 * The derivation reads them in its one parse of a span's attributes (derived.ts).
 */
export const PARAMETER_KEYS = [...PARAMETERS.map(([, key]) => key), 'llm.invocation_parameters'];

/** A parameter's text as its type. */
const typed = (text: string, type: string) =>
  type === 'VARCHAR' ? text : type === 'JSON' ? `try(json(${text}))` : `TRY_CAST(${text} AS ${type})`;

/**
 * A macro's argument is pasted wherever the macro names it: one that names a list several times
 * takes it as `list_transform([list], lambda x: ...)[1]`, one copy of the expression (as the
 * Anthropic macros do, anthropic-messages.ts). Lambda parameters are `g_` names: the macros are
 * pasted into queries whose tables have one-letter aliases (`c`, `s`, `r` ...).
 */
export const GENAI_MACROS_SQL = `
CREATE OR REPLACE MACRO agl_genai_text(v) AS CASE WHEN json_type(v) = 'VARCHAR' THEN v->>'$' ELSE CAST(v AS VARCHAR) END;
CREATE OR REPLACE MACRO agl_genai_list(t) AS list_filter(coalesce(try_cast(try(json(t)) AS JSON[]), []), lambda g_x: json_type(g_x) = 'OBJECT');
CREATE OR REPLACE MACRO agl_genai_parts(g_m) AS coalesce(try_cast(g_m->'parts' AS JSON[]), []);
CREATE OR REPLACE MACRO agl_genai_system(t) AS list_transform([try(json(t))], lambda g_d: CASE
  WHEN json_type(g_d) = 'ARRAY' THEN coalesce(try_cast(g_d AS JSON[]), [])
  WHEN t IS NOT NULL AND json_type(g_d) IS DISTINCT FROM 'ARRAY' THEN [json_object('type', 'text', 'content', t)]
  ELSE [] END)[1];
CREATE OR REPLACE MACRO agl_genai_content_part(g_p) AS CASE g_p->>'type'
  WHEN 'text' THEN json_object('type', 'text', 'text', g_p->>'content')
  WHEN 'uri' THEN CASE WHEN (g_p->>'modality') = 'image' THEN json_object('type', 'image_url', 'image_url', json_object('url', g_p->>'uri')) END
  WHEN 'blob' THEN CASE
    WHEN (g_p->>'modality') = 'image' THEN json_object('type', 'image_url', 'image_url',
      json_object('url', concat('data:', g_p->>'mime_type', ';base64,', g_p->>'content')))
    WHEN (g_p->>'modality') = 'audio' AND (g_p->>'mime_type') IN ('audio/wav', 'audio/x-wav', 'audio/wave', 'audio/mpeg', 'audio/mp3')
      THEN json_object('type', 'input_audio', 'input_audio', json_object('data', g_p->>'content',
        'format', CASE WHEN (g_p->>'mime_type') IN ('audio/mpeg', 'audio/mp3') THEN 'mp3' ELSE 'wav' END)) END
  WHEN 'file' THEN CASE WHEN (g_p->>'file_id') IS NOT NULL THEN json_object('type', 'file', 'file', json_object('file_id', g_p->>'file_id')) END
  END;
CREATE OR REPLACE MACRO agl_genai_held(g_p) AS json_type(g_p) = 'OBJECT'
  AND ((g_p->>'type') IN ${HELD_TYPES} OR agl_genai_content_part(g_p) IS NOT NULL);
CREATE OR REPLACE MACRO agl_genai_message(role, name, parts) AS list_transform([parts], lambda g_ps: json_merge_patch(
  json_object('role', role, 'content', CASE
    WHEN len(list_filter(g_ps, lambda g_p: (g_p->>'type') IN ('uri', 'blob', 'file') AND agl_genai_content_part(g_p) IS NOT NULL)) > 0
      THEN to_json(list_filter(list_transform(g_ps, lambda g_p: agl_genai_content_part(g_p)), lambda g_c: g_c IS NOT NULL))
    ELSE to_json(nullif(array_to_string(list_transform(list_filter(g_ps, lambda g_p: (g_p->>'type') = 'text'), lambda g_p: g_p->>'content'), ''), '')) END),
  json_object(
    'name', name,
    'tool_calls', nullif(to_json(list_transform(list_filter(g_ps, lambda g_p: (g_p->>'type') = 'tool_call'),
      lambda g_p: json_object('id', g_p->>'id', 'type', 'function', 'function', json_object('name', g_p->>'name', 'arguments', agl_genai_text(g_p->'arguments'))))), '[]'::JSON),
    'reasoning_content', nullif(array_to_string(list_transform(list_filter(g_ps, lambda g_p: (g_p->>'type') = 'reasoning'), lambda g_p: g_p->>'content'), ''), ''))))[1];
CREATE OR REPLACE MACRO agl_genai_turn(g_m) AS list_transform([agl_genai_parts(g_m)], lambda g_ps: list_concat(
  list_transform(list_filter(g_ps, lambda g_p: (g_p->>'type') = 'tool_call_response'),
    lambda g_p: json_object('role', 'tool', 'content', agl_genai_text(g_p->'response'), 'tool_call_id', g_p->>'id')),
  CASE WHEN len(g_ps) > 0 AND len(list_filter(g_ps, lambda g_p: (g_p->>'type') IS DISTINCT FROM 'tool_call_response')) = 0 THEN []
    ELSE [agl_genai_message(g_m->>'role', g_m->>'name', list_filter(g_ps, lambda g_p: (g_p->>'type') IS DISTINCT FROM 'tool_call_response'))] END))[1];
CREATE OR REPLACE MACRO agl_genai_input(system, input) AS CASE WHEN system IS NOT NULL OR input IS NOT NULL THEN list_transform(
  [flatten(list_transform(agl_genai_list(input), lambda g_m: agl_genai_turn(g_m)))], lambda g_ms: to_json(list_concat(
    list_transform([agl_genai_system(system)], lambda g_sp: CASE WHEN len(g_sp) > 0
      THEN list_filter([agl_genai_message('system', NULL, g_sp)], lambda g_s: NOT list_contains(g_ms, g_s)) ELSE [] END)[1],
    g_ms)))[1] END;
CREATE OR REPLACE MACRO agl_genai_output(output) AS CASE WHEN output IS NOT NULL
  THEN to_json(flatten(list_transform(agl_genai_list(output), lambda g_m: agl_genai_turn(g_m)))) END;
CREATE OR REPLACE MACRO agl_genai_finish(reasons, output) AS list_transform([coalesce(try(reasons->>0), agl_genai_list(output)[1]->>'finish_reason')],
  lambda g_r: CASE WHEN g_r = 'tool_call' THEN 'tool_calls' ELSE g_r END)[1];
CREATE OR REPLACE MACRO agl_genai_tools(t) AS to_json(list_transform(agl_genai_list(t), lambda g_d: CASE
  WHEN json_type(g_d->'function') = 'OBJECT' THEN g_d
  ELSE json_object('type', coalesce(g_d->>'type', 'function'), 'function', json_merge_patch(g_d, '{"type":null}')) END));
CREATE OR REPLACE MACRO agl_genai_extra_of(side, messages) AS flatten(list_transform(messages, lambda g_m, g_i:
  list_transform(list_filter(agl_genai_parts(g_m), lambda g_p: NOT agl_genai_held(g_p)),
    lambda g_p: json_object('in', side, 'message', g_i - 1, 'part', g_p))));
CREATE OR REPLACE MACRO agl_genai_extra(system, input, output) AS nullif(to_json(list_concat(
  list_transform(list_filter(agl_genai_system(system), lambda g_p: NOT agl_genai_held(g_p)), lambda g_p: json_object('in', 'system_instructions', 'part', g_p)),
  agl_genai_extra_of('input', agl_genai_list(input)),
  agl_genai_extra_of('output', agl_genai_list(output)))), '[]'::JSON);
CREATE OR REPLACE MACRO agl_genai_parameters(texts) AS list_transform([texts], lambda g_r: nullif(json_merge_patch(
  coalesce(try(json(g_r[${PARAMETER_KEYS.length}])), '{}'),
  json_object(${PARAMETERS.map(([name, , type], i) => `'${name}', ${typed(`g_r[${i + 1}]`, type)}`).join(', ')})), '{}'::JSON))[1];`;

/**
 * The documents of a list of operation.details records' attributes `records` (JSON[], in time
 * order), as text: the first record's input, system instructions and tools that has them, and
 * the output messages of every record together (an instrumentation that streams writes one
 * record per output item).
 */
export const detailsDocuments = (records: string) => `
  list_filter(list_transform(${records}, lambda g_d: g_d->>'${GENAI.inputMessages}'), lambda g_x: g_x IS NOT NULL)[1] AS details_input,
  list_filter(list_transform(${records}, lambda g_d: g_d->>'${GENAI.systemInstructions}'), lambda g_x: g_x IS NOT NULL)[1] AS details_system,
  list_filter(list_transform(${records}, lambda g_d: g_d->>'${GENAI.toolDefinitions}'), lambda g_x: g_x IS NOT NULL)[1] AS details_tools,
  CASE WHEN len(list_filter(${records}, lambda g_d: (g_d->'${GENAI.outputMessages}') IS NOT NULL)) > 0
    THEN CAST(to_json(flatten(list_transform(${records}, lambda g_d: agl_genai_list(g_d->>'${GENAI.outputMessages}')))) AS VARCHAR) END AS details_output`;
