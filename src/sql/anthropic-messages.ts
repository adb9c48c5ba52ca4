/**
 * Anthropic Messages in OpenAI chat shape, as SQL macros that llm_calls' derivation calls
 * (derived.ts, `agl.llm.api` = 'messages'). A message's content is a string or a list of blocks:
 * `tool_result` blocks become tool messages (before the rest of their user turn, as chat
 * wants them after the assistant's tool calls), `tool_use` blocks the assistant's `tool_calls`
 * with their input as JSON text, `thinking` blocks its `reasoning_content`, images `image_url`
 * parts. The system prompt, a string or text blocks, becomes the first message. Stop reasons
 * read as chat's finish reasons; the native request and response stay on the span.
 *
 * A macro's argument is pasted wherever the macro names it: one that names its blocks several
 * times takes them as `list_transform([blocks], lambda bs: ...)[1]`, one copy of the expression.
 * Pasted, a message's blocks were a dozen copies that every read of llm_calls bound and
 * optimized (7 of the 27 ms of planning a rollout's llm_calls) and every derivation computed.
 */
export const ANTHROPIC_MACROS_SQL = `
CREATE OR REPLACE MACRO agl_anthropic_blocks(c) AS CASE
  WHEN c IS NULL OR json_type(c) = 'NULL' THEN []
  WHEN json_type(c) = 'VARCHAR' THEN [json_object('type', 'text', 'text', c->>'$')]
  ELSE coalesce(try_cast(c AS JSON[]), []) END;
CREATE OR REPLACE MACRO agl_anthropic_text(blocks) AS
  array_to_string(list_transform(list_filter(blocks, lambda b: (b->>'type') = 'text'), lambda b: b->>'text'), '');
CREATE OR REPLACE MACRO agl_anthropic_content(blocks) AS list_transform([blocks], lambda bs: CASE
  WHEN len(list_filter(bs, lambda b: (b->>'type') <> 'text')) = 0 THEN to_json(agl_anthropic_text(bs))
  ELSE to_json(list_transform(bs, lambda b: CASE b->>'type'
    WHEN 'text' THEN json_object('type', 'text', 'text', b->>'text')
    WHEN 'image' THEN json_object('type', 'image_url', 'image_url', json_object('url', CASE WHEN (b->>'$.source.type') = 'url'
      THEN b->>'$.source.url' ELSE concat('data:', b->>'$.source.media_type', ';base64,', b->>'$.source.data') END))
    ELSE b END)) END)[1];
CREATE OR REPLACE MACRO agl_anthropic_assistant(blocks) AS list_transform([blocks], lambda bs: json_merge_patch(
  json_object('role', 'assistant', 'content', nullif(agl_anthropic_text(bs), '')),
  json_object(
    'tool_calls', nullif(to_json(list_transform(list_filter(bs, lambda b: (b->>'type') = 'tool_use'),
      lambda b: json_object('id', b->>'id', 'type', 'function', 'function', json_object('name', b->>'name',
        'arguments', CASE WHEN json_type(b->'input') = 'VARCHAR' THEN b->>'input' ELSE CAST(b->'input' AS VARCHAR) END)))), '[]'::JSON),
    'reasoning_content', nullif(array_to_string(list_transform(list_filter(bs, lambda b: (b->>'type') = 'thinking'), lambda b: b->>'thinking'), ''), ''))))[1];
CREATE OR REPLACE MACRO agl_anthropic_turn(role, blocks) AS list_transform([blocks], lambda bs: list_concat(
  list_transform(list_filter(bs, lambda b: (b->>'type') = 'tool_result'), lambda b: json_object('role', 'tool', 'tool_call_id', b->>'tool_use_id',
    'content', CASE WHEN json_type(b->'content') = 'ARRAY' THEN agl_anthropic_text(try_cast(b->'content' AS JSON[])) ELSE b->>'content' END)),
  CASE WHEN len(list_filter(bs, lambda b: (b->>'type') <> 'tool_result')) = 0 THEN []
    WHEN role = 'assistant' THEN [agl_anthropic_assistant(bs)]
    ELSE [json_object('role', role, 'content', agl_anthropic_content(list_filter(bs, lambda b: (b->>'type') <> 'tool_result')))] END))[1];
CREATE OR REPLACE MACRO agl_anthropic_input(system, messages) AS to_json(list_concat(
  list_transform([agl_anthropic_blocks(system)], lambda sb: CASE WHEN len(sb) > 0 THEN [json_object('role', 'system', 'content', agl_anthropic_text(sb))] ELSE [] END)[1],
  flatten(list_transform(coalesce(try_cast(messages AS JSON[]), []), lambda m: agl_anthropic_turn(m->>'role', agl_anthropic_blocks(m->'content'))))));
CREATE OR REPLACE MACRO agl_anthropic_tools(tools) AS to_json(list_transform(try_cast(tools AS JSON[]), lambda t: CASE
  WHEN (t->'input_schema') IS NULL THEN t
  ELSE json_object('type', 'function', 'function', json_merge_patch(json_object('name', t->>'name', 'parameters', t->'input_schema'),
    json_object('description', t->>'description'))) END));
CREATE OR REPLACE MACRO agl_anthropic_finish(reason) AS CASE reason
  WHEN 'end_turn' THEN 'stop' WHEN 'stop_sequence' THEN 'stop' WHEN 'max_tokens' THEN 'length' WHEN 'tool_use' THEN 'tool_calls'
  ELSE reason END;`;
