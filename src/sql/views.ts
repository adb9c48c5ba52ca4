/**
 * The SQL views users read (docs/sql.md): `llm_calls` and `rewards` over the tables derived
 * from spans (derived.ts), and what the algorithms recorded (`sft_iterations`,
 * `training_steps`, `prompt_versions`). Views hold no data, so they are re-created on every
 * writable open: a file always shows this agl's definitions.
 *
 * `llm_calls` gives one row per LLM call in OpenAI chat format. Besides the derived rows
 * (dialects 1-3, see derived.ts) it reads GenAI log-record events (`gen_ai.user.message`,
 * `gen_ai.choice`, ... of @opentelemetry/instrumentation-openai), joined to their span by trace
 * and span id (dialect 4). A call that two instrumentations both describe (a framework span whose
 * child, or whose response id, is an agl capture) is the agl row only; an agent's own capture of
 * a call it made through the gateway is the gateway's row only.
 *
 * DuckDB's `->>` binds looser than AND, OR and =: always parenthesize it in conditions.
 */
import { APO_RUN, EVAL_TASK, GEPA_RUN, EVAL_VARIANT, GRPO_STEP, SFT_ITERATION } from '../api/run-records.js';
import { ATTR, EVAL, GENAI, GRPO, SFT } from '../api/semconv.js';
import { ANTHROPIC_MACROS_SQL } from './anthropic-messages.js';
import { detailsDocuments, GENAI_MACROS_SQL, PARAMETER_KEYS } from './genai-messages.js';
import { sqlText } from './literals.js';
import {
  ALL_FRESH_CALLS,
  CALL_ROWS,
  DERIVED_ONLY_SCHEMA,
  DERIVED_VIEWS_SQL,
  derivedRowsOf,
  FRESH_CALLS_CTE,
  FRESH_CALLS_SCHEMA,
  freshCallsCte,
  FRESH_MACROS_SQL,
  isLogEvent,
  LOG_EVENT_VIEWS,
  LOG_EVENT_REWARDS_SQL,
  NO_LOG_EVENTS_SQL,
  OWN_CALLS_SCHEMA,
  readable,
  selectedCallRows,
  type SpanKeys,
  type SpanSelection,
  spanKeysCondition,
  STORED_CALL_ROWS,
  STORED_DERIVED_VIEWS_SQL,
  STORED_FRESH_MACROS_SQL,
  STORED_VIEWS_SQL,
} from './derived.js';

const COLUMNS = `rollout_id, attempt_id, trace_id, span_id, sequence_id, start_time, end_time, provider, model,
  input_messages, output_messages, tools, prompt_token_ids, response_token_ids, response_logprobs,
  input_tokens, output_tokens, response_id, finish_reason, parent_id, name, parameters, extra_parts`;

/**
 * The view `log_event_calls`: the calls read from GenAI log events (dialects 4 and 5),
 * as llm_call_rows gives them.
 */
const LOG_EVENT_CALLS_SQL = `CREATE OR REPLACE VIEW ${LOG_EVENT_VIEWS[0]} AS WITH
events AS (
  SELECT trace_id, span_id, coalesce(event_name, attributes->>'event.name') AS event, try(json(body)) AS body, attributes, time, commit_seq
  FROM logs WHERE ${isLogEvent()} AND coalesce(event_name, attributes->>'event.name') <> '${GENAI.evaluationResult}'
),
event_messages AS (
  SELECT trace_id, span_id,
    to_json(list(json_merge_patch(
      json_object('role', regexp_extract(event, '^gen_ai\\.(\\w+)\\.message$', 1), 'content', body->'content'),
      json_object('tool_calls', body->'tool_calls', 'tool_call_id', CASE WHEN event = 'gen_ai.tool.message' THEN body->>'id' END))
      ORDER BY time) FILTER (WHERE event LIKE '%.message')) AS input_messages,
    to_json(list(json_merge_patch(json_object('role', coalesce(body->>'$.message.role', 'assistant'), 'content', body->'$.message.content'),
      json_object('tool_calls', body->'$.message.tool_calls')) ORDER BY TRY_CAST(body->>'index' AS INTEGER)) FILTER (WHERE event = 'gen_ai.choice')) AS output_messages,
    min(body->>'finish_reason' ORDER BY TRY_CAST(body->>'index' AS INTEGER)) FILTER (WHERE event = 'gen_ai.choice') AS finish_reason,
    list(attributes ORDER BY time, commit_seq) FILTER (WHERE event = '${GENAI.operationDetails}') AS details
  FROM events GROUP BY trace_id, span_id
),
-- The span's own GenAI attributes, read after the join: only spans with events are parsed.
-- The documents of operation.details records (dialect 5): the span's own attributes first, then the records'.
event_documents AS (
  SELECT e.*, s.rollout_id, s.attempt_id, s.parent_id, s.name, s.sequence_id, s.start_time, s.end_time, s.attributes AS a,
    coalesce(s.attributes->>'${GENAI.inputMessages}', e.details_input) AS input_doc,
    coalesce(s.attributes->>'${GENAI.outputMessages}', e.details_output) AS output_doc,
    coalesce(s.attributes->>'${GENAI.systemInstructions}', e.details_system) AS system_doc,
    coalesce(s.attributes->>'${GENAI.toolDefinitions}', e.details_tools) AS tools_doc
  FROM (SELECT *, ${detailsDocuments('coalesce(details, [])')} FROM event_messages) e JOIN spans s USING (trace_id, span_id)
  -- Tested after the join (e.span_id is never NULL): pushed into the scan of spans, it parsed
  -- the attributes of every span a filter on llm_calls kept (a rollout's llm_calls: 10,000
  -- spans' JSON, 14 ms), with no log event to join.
  WHERE ${readable('s.attributes')} OR e.span_id IS NULL
),
event_calls AS (
  SELECT rollout_id, attempt_id, trace_id, span_id, parent_id, name, sequence_id, start_time, end_time,
    lower(coalesce(a->>'gen_ai.provider.name', a->>'gen_ai.system')) AS provider,
    coalesce(a->>'gen_ai.response.model', a->>'gen_ai.request.model') AS model,
    CASE WHEN details IS NULL THEN input_messages ELSE agl_genai_input(system_doc, input_doc) END AS input_messages,
    CASE WHEN details IS NULL THEN output_messages ELSE agl_genai_output(output_doc) END AS output_messages,
    CASE WHEN details IS NOT NULL AND tools_doc IS NOT NULL THEN agl_genai_tools(tools_doc) END AS tools,
    NULL::INTEGER[] AS prompt_token_ids, NULL::INTEGER[] AS response_token_ids, NULL::DOUBLE[] AS response_logprobs,
    TRY_CAST(coalesce(a->>'gen_ai.usage.input_tokens', a->>'gen_ai.usage.prompt_tokens') AS BIGINT) AS input_tokens,
    TRY_CAST(coalesce(a->>'gen_ai.usage.output_tokens', a->>'gen_ai.usage.completion_tokens') AS BIGINT) AS output_tokens,
    a->>'gen_ai.response.id' AS response_id,
    CASE WHEN details IS NULL THEN coalesce(finish_reason, a->'gen_ai.response.finish_reasons'->>0)
      ELSE agl_genai_finish(a->>'gen_ai.response.finish_reasons', output_doc) END AS finish_reason,
    CASE WHEN details IS NULL THEN 4 ELSE 5 END AS dialect,
    agl_genai_parameters(json_extract_string(a, [${PARAMETER_KEYS.map(sqlText).join(', ')}])) AS parameters,
    CASE WHEN details IS NOT NULL THEN agl_genai_extra(system_doc, input_doc, output_doc) END AS extra_parts
  FROM event_documents
  -- agl's own capture asked to write the GenAI event too (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT):
  -- its span's exact exchange is the call.
  WHERE (a->>'${ATTR.llmApi}') IS NULL
)
SELECT * FROM event_calls;`;

/**
 * The llm_calls rows of agl's own calls in `rows` (dialects 0 and 1). An instrumented agent
 * calling through the gateway: the agent's capture (1) is the parent of the gateway's (0),
 * which holds the exact upstream exchange (token ids); the gateway's row is kept. (Rows are
 * read in place, not through a materialized CTE, so that a query reads only its columns; the
 * anti-join's build side holds gateway rows only.)
 */
const ownCallsOf = (rows: string, keys: string) => `SELECT ${COLUMNS} FROM ${rows} c
  ANTI JOIN (SELECT trace_id, parent_id AS span_id FROM ${keys} WHERE dialect = 0 AND parent_id IS NOT NULL) g USING (trace_id, span_id)
WHERE c.dialect <= 1`;

/**
 * The llm_calls rows of `rows` (a relation shaped like llm_call_rows); `withEvents` adds the
 * calls read from GenAI log events. The anti-joins only ask whether a call with some trace,
 * parent, dialect or response id exists: `keys` (those columns) may be any relation with the
 * same keys as `rows`, rows repeated or not (the span directory's: fleet-views.ts).
 */
export const llmCallsOf = (rows: string, withEvents = true, keys = rows) => `WITH
others AS (SELECT * FROM ${rows} WHERE dialect > 1${withEvents ? ` UNION ALL BY NAME SELECT * FROM ${LOG_EVENT_VIEWS[0]}` : ''})
${ownCallsOf(rows, keys)}
UNION ALL
-- The other dialects' calls that no own call describes (as its child, or by response id). Anti
-- joins, not NOT EXISTS: DuckDB planned those as delim joins, which hold every row they pass,
-- messages and all (a count of a soak's 23,070 derived calls: 76-105 ms and 65 MB, now 38-43 ms
-- and 18 MB).
SELECT ${COLUMNS} FROM others o
  ANTI JOIN (SELECT trace_id, parent_id AS span_id FROM ${keys} WHERE dialect <= 1 AND parent_id IS NOT NULL) p USING (trace_id, span_id)
  ANTI JOIN (SELECT response_id FROM ${keys} WHERE dialect <= 1 AND response_id IS NOT NULL) r USING (response_id)
-- A span's calls share its rollout_id: partitioned by it too, a filter on rollout_id reaches the
-- scans below the window, not only the rows it returns. Of a span's rows, the one read with its
-- operation.details records (5) holds its attributes' documents too; a row with no content
-- (an inference span whose content came as log events, 4) comes last.
QUALIFY row_number() OVER (PARTITION BY o.rollout_id, o.trace_id, o.span_id
  ORDER BY CASE WHEN o.dialect = 5 THEN 0 WHEN o.input_messages IS NULL AND o.output_messages IS NULL THEN 9 ELSE o.dialect END) = 1`;

/**
 * The `llm_calls` rows of the spans that `keys` select: the view's rows (one per call, the calls
 * read from GenAI log events included) with only those spans derived on the fly
 * (derivedRowsOf), not every span the deriver has not reached yet. The same rows as the view
 * filtered by the keys while the spans of one call (a capture and its gateway child, a framework
 * span and its agl child) share their keys, as the spans of one trace or one attempt do.
 * `ownCallsOnly`: agl's own calls alone, the same rows while ownCallsOnlySql holds.
 */
export const llmCallsOfKeys = (
  keys: SpanKeys,
  ownCallsOnly = false,
) => `WITH key_call_rows AS MATERIALIZED (${derivedRowsOf(keys, ownCallsOnly).calls})
SELECT * FROM (${ownCallsOnly ? ownCallsOf('key_call_rows', 'key_call_rows') : llmCallsOf('key_call_rows')}) WHERE ${spanKeysCondition(keys)}`;

/**
 * CTEs that end in `token_calls`: the LLM calls that can carry token ids, llm_calls without the
 * calls read from GenAI log events (their token ids are always NULL). Joining log events to
 * their spans reads every stored span's attributes, even with no such event: 0.4-0.5 s of CPU per
 * read on 2,300 spans of a GRPO batch (token ids in their answers), against 0.1 s for the rest.
 * The spans not derived yet are parsed once per statement however often it reads token_calls.
 */
export const TOKEN_CALLS_CTES = `${FRESH_CALLS_CTE},
token_calls AS (${llmCallsOf(CALL_ROWS, false)})`;

/**
 * TOKEN_CALLS_CTES of the spans that `spans` select alone: a batch's token calls are its
 * rollouts', and the spans of other rollouts still waiting for the deriver (the next step's,
 * under way) are not parsed for it, nor the stored calls of others deduplicated. The same rows
 * for those rollouts while the spans of one call share their rollout (llmCallsOfKeys).
 */
export const tokenCallsCtes = (spans: SpanSelection) => `${freshCallsCte(spans)},
token_calls AS (${llmCallsOf(selectedCallRows(spans), false)})`;

/**
 * CTEs that end in `llm_calls`, the view's rows, for a query that reads them in bulk: DuckDB
 * prunes the columns a query does not read from the stored calls (their token ids, for
 * messages) only when the rows are the query's own CTE, not a view wrapped around the
 * materialized `fresh_calls`. A messages export of 600,000 calls read every column through the
 * view.
 */
export const LLM_CALLS_CTES = `${FRESH_CALLS_CTE},
llm_calls AS (${llmCallsOf(CALL_ROWS)})`;

/** token_calls as one relation. */
export const TOKEN_CALLS_SQL = `(WITH ${TOKEN_CALLS_CTES} SELECT * FROM token_calls)`;

/** The columns of `sft_iterations`: [name, attribute of the iteration span, SQL type]. */
const SFT_COLUMNS = SFT_ITERATION.columns;

/** One row per iteration of an SFT run, from the span the algorithm records for it (algorithms/sft/record.ts). */
const SFT_ITERATIONS_SQL = `CREATE OR REPLACE VIEW sft_iterations AS
SELECT rollout_id AS run_id, ${SFT_COLUMNS.map(([name, key, type]) => `${type === 'JSON' ? `attributes->'${key}'` : `TRY_CAST(attributes->>'${key}' AS ${type})`} AS ${name}`).join(',\n  ')},
  start_time, end_time
FROM spans WHERE name = '${SFT.iterationSpan}' AND ${readable()}`;

/** The columns of `training_steps`: [name, attribute of the step span, SQL type]. */
const GRPO_COLUMNS = GRPO_STEP.columns;

/** One row per step of a GRPO run, from the span the algorithm records for it (algorithms/grpo/record.ts). */
const TRAINING_STEPS_SQL = `CREATE OR REPLACE VIEW training_steps AS
SELECT rollout_id AS run_id, ${GRPO_COLUMNS.map(([name, key, type]) => `TRY_CAST(attributes->>'${key}' AS ${type}) AS ${name}`).join(',\n  ')},
  start_time, end_time
FROM spans WHERE name = '${GRPO.stepSpan}' AND ${readable()}`;

/** A run record's columns as SQL select items: JSON ones as JSON, the rest cast to their type. */
const recordColumns = (columns: typeof EVAL_VARIANT.columns) =>
  columns
    .map(([name, key, type]) =>
      type === 'JSON'
        ? `TRY_CAST(attributes->>'${key}' AS JSON) AS ${name}`
        : `TRY_CAST(attributes->>'${key}' AS ${type}) AS ${name}`,
    )
    .join(',\n  ');

/** One row per run and variant of an evaluation (algorithms/eval/record.ts). */
const EVALUATIONS_SQL = `CREATE OR REPLACE VIEW evaluations AS
SELECT rollout_id AS run_id, ${recordColumns(EVAL_VARIANT.columns)},
  start_time AS created
FROM spans WHERE name = '${EVAL.variantSpan}' AND ${readable()}`;

/** One row per run, variant and task of an evaluation. */
const EVALUATION_TASKS_SQL = `CREATE OR REPLACE VIEW evaluation_tasks AS
SELECT rollout_id AS run_id, ${recordColumns(EVAL_TASK.columns)},
  mean - baseline_mean AS change
FROM spans WHERE name = '${EVAL.taskSpan}' AND ${readable()}`;

/**
 * `prompt_versions`: one row per prompt an APO run, or per candidate a GEPA run, made or started
 * from, read from the spans the run records on its own rollout (src/algorithms/apo/record.ts,
 * gepa/record.ts; docs/sql.md): lineage, critique, scores, whether it is in the beam (GEPA: the
 * Pareto frontier) or the best as the run's latest round or end says, and which component
 * (prompt_template resource) it changed.
 */
const { spans: S, attributes: A } = APO_RUN;
const { spans: G, attributes: GA } = GEPA_RUN;
const PROMPT_VERSIONS_SQL = `CREATE OR REPLACE VIEW prompt_versions AS
WITH apo AS (
  SELECT rollout_id, attempt_id, sequence_id, start_time, name, attributes AS a FROM spans
  WHERE name IN ('${S.candidate}', '${S.scores}', '${S.round}', '${S.best}') AND ${readable()}
),
-- One span per evaluation holds every prompt's score, as a JSON list in a text attribute.
score_rows AS (
  SELECT s.rollout_id, s.sequence_id, s.a->>'${A.split}' AS split, e.value->>'version' AS version,
    TRY_CAST(e.value->>'score' AS DOUBLE) AS score, TRY_CAST(e.value->>'rollouts' AS BIGINT) AS rollouts, TRY_CAST(e.value->>'failed' AS BIGINT) AS failed
  FROM apo s, json_each(TRY_CAST(s.a->>'${A.scores}' AS JSON)) e
  WHERE s.name = '${S.scores}'
),
scores AS (
  SELECT rollout_id, version,
    arg_max(score, sequence_id) FILTER (WHERE split = 'val_batch') AS batch_score,
    arg_max(score, sequence_id) FILTER (WHERE split = 'val') AS val_score,
    sum(rollouts) AS rollouts, sum(failed) AS failed_rollouts
  FROM score_rows GROUP BY ALL
),
latest AS (
  SELECT rollout_id,
    arg_max(CASE WHEN name = '${S.best}' THEN a->>'${A.version}' ELSE a->>'${A.best}' END, sequence_id) AS best,
    arg_max(a->>'${A.beam}', sequence_id) FILTER (WHERE name = '${S.round}') AS beam
  FROM apo WHERE name IN ('${S.round}', '${S.best}') GROUP BY rollout_id
),
gepa AS (
  SELECT rollout_id, attempt_id, sequence_id, start_time, name, attributes AS a FROM spans
  WHERE name IN ('${G.candidate}', '${G.scores}', '${G.iteration}', '${G.best}') AND ${readable()}
),
gepa_scores AS (
  SELECT s.rollout_id, e.value->>'version' AS version,
    arg_max(TRY_CAST(e.value->>'score' AS DOUBLE), s.sequence_id) FILTER (WHERE s.a->>'${GA.split}' = 'val') AS val_score,
    sum(TRY_CAST(e.value->>'rollouts' AS BIGINT)) AS rollouts, sum(TRY_CAST(e.value->>'failed' AS BIGINT)) AS failed_rollouts
  FROM gepa s, json_each(TRY_CAST(s.a->>'${GA.scores}' AS JSON)) e
  WHERE s.name = '${G.scores}' GROUP BY ALL
),
gepa_latest AS (
  SELECT rollout_id,
    arg_max(CASE WHEN name = '${G.best}' THEN a->>'${GA.version}' ELSE a->>'${GA.best}' END, sequence_id) AS best,
    arg_max(a->>'${GA.frontier}', sequence_id) FILTER (WHERE name = '${G.iteration}') AS frontier
  FROM gepa WHERE name IN ('${G.iteration}', '${G.best}') GROUP BY rollout_id
)
SELECT * EXCLUDE (seq) FROM (
SELECT c.rollout_id AS run_id, t.sequence_id AS session, c.a->>'${A.version}' AS version,
  c.a->>'${A.resourcesId}' AS resources_id, c.a->>'${A.promptResource}' AS prompt_resource,
  c.a->>'${A.parent}' AS parent, TRY_CAST(c.a->>'${A.round}' AS INTEGER) AS round,
  c.a->>'${A.status}' AS status, c.a->>'${A.reason}' AS reason,
  c.a->>'${A.template}' AS template, c.a->>'${A.critique}' AS critique,
  TRY_CAST(c.a->>'${A.gradientScore}' AS DOUBLE) AS gradient_score,
  s.batch_score, s.val_score, coalesce(s.rollouts, 0) AS rollouts, coalesce(s.failed_rollouts, 0) AS failed_rollouts,
  coalesce(list_contains(string_split(l.beam, ','), c.a->>'${A.version}'), false) AS in_beam,
  coalesce(l.best = (c.a->>'${A.version}'), false) AS is_best,
  c.start_time AS created, 'apo' AS algorithm, c.a->>'${A.promptResource}' AS component,
  coalesce(TRY_CAST(c.a->>'${A.templates}' AS JSON), json_object(c.a->>'${A.promptResource}', c.a->>'${A.template}')) AS templates,
  CASE WHEN c.a->>'${A.status}' = 'seed' THEN 'seed' ELSE 'mutation' END AS kind,
  CASE WHEN c.a->>'${A.parent}' IS NULL THEN []::VARCHAR[] ELSE [c.a->>'${A.parent}'] END AS parents,
  c.sequence_id AS seq
FROM apo c
LEFT JOIN scores s ON s.rollout_id = c.rollout_id AND s.version = (c.a->>'${A.version}')
LEFT JOIN latest l ON l.rollout_id = c.rollout_id
LEFT JOIN attempts t ON t.rollout_id = c.rollout_id AND t.attempt_id = c.attempt_id
WHERE c.name = '${S.candidate}'
UNION ALL
SELECT c.rollout_id, t.sequence_id, c.a->>'${GA.version}', c.a->>'${GA.resourcesId}', nullif(c.a->>'${GA.component}', ''),
  nullif(split_part(c.a->>'${GA.parents}', ',', 1), ''), TRY_CAST(c.a->>'${GA.iteration}' AS INTEGER),
  c.a->>'${GA.status}', c.a->>'${GA.reason}',
  -- The template it changed (the first, for a merge that changed several); the seed's first one.
  TRY_CAST(c.a->>'${GA.templates}' AS JSON)->>coalesce(nullif(split_part(c.a->>'${GA.component}', ',', 1), ''), json_keys(TRY_CAST(c.a->>'${GA.templates}' AS JSON))[1]),
  c.a->>'${GA.reflection}', TRY_CAST(c.a->>'${GA.parentBatchScore}' AS DOUBLE), TRY_CAST(c.a->>'${GA.batchScore}' AS DOUBLE),
  s.val_score, coalesce(s.rollouts, 0), coalesce(s.failed_rollouts, 0),
  coalesce(list_contains(string_split(l.frontier, ','), c.a->>'${GA.version}'), false),
  coalesce(l.best = (c.a->>'${GA.version}'), false),
  c.start_time, 'gepa', nullif(c.a->>'${GA.component}', ''), TRY_CAST(c.a->>'${GA.templates}' AS JSON),
  c.a->>'${GA.kind}', list_filter(string_split(coalesce(c.a->>'${GA.parents}', ''), ','), lambda p: p <> ''), c.sequence_id
FROM gepa c
LEFT JOIN gepa_scores s ON s.rollout_id = c.rollout_id AND s.version = (c.a->>'${GA.version}')
LEFT JOIN gepa_latest l ON l.rollout_id = c.rollout_id
LEFT JOIN attempts t ON t.rollout_id = c.rollout_id AND t.attempt_id = c.attempt_id
WHERE c.name = '${G.candidate}'
) ORDER BY run_id, seq`;

/**
 * `prompt_frontiers`: one row per version in the beam (APO) or on the Pareto frontier (GEPA) as
 * each round or iteration left it, so every frontier a run had is queryable, not only its last.
 */
const PROMPT_FRONTIERS_SQL = `CREATE OR REPLACE VIEW prompt_frontiers AS
SELECT rollout_id AS run_id, algorithm, round, f.version, f.version = best AS is_best, end_time AS time
FROM (
  SELECT rollout_id, 'apo' AS algorithm, TRY_CAST(attributes->>'${A.round}' AS INTEGER) AS round,
    attributes->>'${A.beam}' AS members, attributes->>'${A.best}' AS best, end_time, sequence_id
  FROM spans WHERE name = '${S.round}' AND ${readable()}
  UNION ALL
  SELECT rollout_id, 'gepa', TRY_CAST(attributes->>'${GA.iteration}' AS INTEGER),
    attributes->>'${GA.frontier}', attributes->>'${GA.best}', end_time, sequence_id
  FROM spans WHERE name = '${G.iteration}' AND ${readable()}
), unnest(list_filter(string_split(coalesce(members, ''), ','), lambda v: v <> '')) AS f(version)
ORDER BY run_id, sequence_id, f.version`;

const REWARDS_VIEW_SQL = `CREATE OR REPLACE VIEW rewards AS
SELECT rollout_id, attempt_id, trace_id, span_id, sequence_id, time, name, value, is_primary, feedback, source, label FROM reward_rows`;

/**
 * The views users and adapters read, over `spans`, `logs`, the `derived_*` tables and
 * `underived_spans`: created in the file's schema over what it stores, and again in the span
 * directory's schema over every server's spans (src/store/fleet-views.ts).
 */
export const READ_VIEWS_SQL = `
${GENAI_MACROS_SQL}
${ANTHROPIC_MACROS_SQL}
${LOG_EVENT_CALLS_SQL}
${LOG_EVENT_REWARDS_SQL}

${DERIVED_VIEWS_SQL}

CREATE OR REPLACE VIEW llm_calls AS WITH ${FRESH_CALLS_CTE} SELECT * FROM (${llmCallsOf(CALL_ROWS)});

${REWARDS_VIEW_SQL};

${SFT_ITERATIONS_SQL};

${TRAINING_STEPS_SQL};

${PROMPT_VERSIONS_SQL};

${PROMPT_FRONTIERS_SQL};

${EVALUATIONS_SQL};

${EVALUATION_TASKS_SQL};
`;

/**
 * The schema `schema` (DERIVED_ONLY_SCHEMA, or the span directory's: fleet-views.ts): llm_calls
 * and rewards over the derived tables alone, which are complete while no span waits for the
 * deriver, and the fresh-row macros as no rows; `callKeys`, the stored calls' keys as
 * llmCallsOf reads them. And the schema `ownCallsSchema` (OWN_CALLS_SCHEMA, or the directory's):
 * llm_calls as agl's own calls alone, which they are while moreover no call of another dialect
 * and no GenAI log event is stored (OWN_CALLS_ONLY). Run on a connection of its own: it
 * switches the schema and back.
 */
export const derivedOnlyViewsSql = (
  schema: string,
  ownCallsSchema: string,
  callKeys = STORED_CALL_ROWS,
) => `CREATE SCHEMA IF NOT EXISTS ${schema};
USE ${schema};
${STORED_FRESH_MACROS_SQL}
${STORED_DERIVED_VIEWS_SQL}
CREATE OR REPLACE VIEW llm_calls AS ${llmCallsOf(STORED_CALL_ROWS, true, callKeys)};
${REWARDS_VIEW_SQL};
CREATE SCHEMA IF NOT EXISTS ${ownCallsSchema};
CREATE OR REPLACE VIEW ${ownCallsSchema}.llm_calls AS ${ownCallsOf(STORED_CALL_ROWS, callKeys)};
USE main;`;

/** FRESH_CALLS_SCHEMA's views; their names resolve through the read's search path (a span directory's too). */
const FRESH_CALLS_VIEWS_SQL = `CREATE SCHEMA IF NOT EXISTS ${FRESH_CALLS_SCHEMA};
USE ${FRESH_CALLS_SCHEMA};
CREATE OR REPLACE VIEW fresh_calls AS ${ALL_FRESH_CALLS};
CREATE OR REPLACE VIEW llm_calls AS ${llmCallsOf(CALL_ROWS)};
USE main;`;

export const VIEWS_SQL = `${STORED_VIEWS_SQL}\n${READ_VIEWS_SQL}\n${derivedOnlyViewsSql(DERIVED_ONLY_SCHEMA, OWN_CALLS_SCHEMA)}\n${NO_LOG_EVENTS_SQL}\n${FRESH_CALLS_VIEWS_SQL}`;

/**
 * The macros and views that the store's queries name, as temporary ones, for a file an older
 * agl wrote, opened read-only: its schema lacks them, and a read-only open cannot add them to the file.
 */
export const TEMPORARY_MACROS_SQL = [GENAI_MACROS_SQL, FRESH_MACROS_SQL, LOG_EVENT_CALLS_SQL, LOG_EVENT_REWARDS_SQL]
  .join('\n')
  .replaceAll('CREATE OR REPLACE MACRO', 'CREATE OR REPLACE TEMP MACRO')
  .replaceAll('CREATE OR REPLACE VIEW', 'CREATE OR REPLACE TEMP VIEW');
