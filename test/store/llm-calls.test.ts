import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ROOT_CONTEXT, SpanKind, trace, type Attributes } from '@opentelemetry/api';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-proto';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { newTempDir, removeDir, startAgl, type InProcessAgl, LLM_CALLS_SEARCH_PATH } from '../support/helpers.js';

// Each instrumentation dialect, as its library writes it, sent through the real SDK and OTLP
// exporters: `llm_calls` must read each into the same OpenAI-format row.

let dir: string;
let agl: InProcessAgl;
let tracerProvider: TracerProvider;
let loggerProvider: LoggerProvider;

before(async () => {
  dir = await newTempDir();
  // No idle-time deriving: every read before the last test takes the on-the-fly path.
  agl = await startAgl(`${dir}/dialects.duckdb`, { deriveWhenIdleMs: Infinity });
  const resource = resourceFromAttributes({ 'service.name': 'dialects' });
  tracerProvider = new TracerProvider({
    resource,
    spanProcessors: [new SimpleSpanProcessor({ exporter: new OTLPTraceExporter({ url: `${agl.url}/v1/traces` }) })],
  });
  loggerProvider = new LoggerProvider({
    resource,
    processors: [new SimpleLogRecordProcessor({ exporter: new OTLPLogExporter({ url: `${agl.url}/v1/logs` }) })],
  });
  record();
  await tracerProvider.forceFlush();
  await loggerProvider.forceFlush();
});
after(async () => {
  await tracerProvider.shutdown();
  await loggerProvider.shutdown();
  await agl.close();
  await removeDir(dir);
});

const tracer = () => tracerProvider.getTracer('dialect-test');
const spanWith = (name: string, attributes: Attributes, parent = ROOT_CONTEXT) => {
  const span = tracer().startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent);
  return span;
};

/** One call in each dialect llm_calls reads. */
function record(): void {
  recordOpenLLMetry();
  recordOpenInference();
  recordGenAiSemconv();
  recordGenAiEvents();
  recordFrameworkOverCapture();
  recordAnthropicDialects();
}

// One Claude call (a system prompt, a tool, the tool's result turn, the answer) as each
// instrumentation writes it.
const CLAUDE_TOOL = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } },
};
const CLAUDE_TURNS = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
];
const CLAUDE_ANSWER = [{ type: 'text', text: 'It is sunny.' }];

/**
 * agl's capture (the exchange itself); OpenLLMetry's Anthropic instrumentation (content as the
 * JSON of its blocks, the provider as `Anthropic`, the stop reason as it is, tools as
 * `llm.request.functions` with their `input_schema`); OpenInference's (a tool result as the user
 * turn's `tool_call_id` and content, tools as their Anthropic JSON schema, no stop reason).
 */
function recordAnthropicDialects(): void {
  spanWith('chat claude-agl', {
    'agl.llm.api': 'messages',
    'gen_ai.provider.name': 'anthropic',
    'agl.llm.request': JSON.stringify({
      model: 'claude-agl',
      max_tokens: 64,
      system: 'You are terse.',
      tools: [CLAUDE_TOOL],
      messages: CLAUDE_TURNS,
    }),
    'agl.llm.response': JSON.stringify({
      id: 'msg_agl',
      type: 'message',
      role: 'assistant',
      model: 'claude-agl',
      content: CLAUDE_ANSWER,
      stop_reason: 'end_turn',
      usage: { input_tokens: 20, output_tokens: 4 },
    }),
  }).end();
  spanWith('anthropic.chat', {
    'gen_ai.system': 'Anthropic',
    'llm.request.type': 'chat',
    'gen_ai.request.model': 'claude-ol',
    'gen_ai.prompt.0.role': 'system',
    'gen_ai.prompt.0.content': 'You are terse.',
    ...Object.fromEntries(
      CLAUDE_TURNS.flatMap((turn, i) => [
        [`gen_ai.prompt.${i + 1}.role`, turn.role],
        [
          `gen_ai.prompt.${i + 1}.content`,
          typeof turn.content === 'string' ? turn.content : JSON.stringify(turn.content),
        ],
      ]),
    ),
    'llm.request.functions.0.name': CLAUDE_TOOL.name,
    'llm.request.functions.0.description': CLAUDE_TOOL.description,
    'llm.request.functions.0.input_schema': JSON.stringify(CLAUDE_TOOL.input_schema),
    'gen_ai.completion.0.role': 'assistant',
    'gen_ai.completion.0.content': JSON.stringify(CLAUDE_ANSWER),
    'gen_ai.completion.0.finish_reason': 'end_turn',
    'gen_ai.usage.prompt_tokens': 20,
    'gen_ai.usage.completion_tokens': 4,
    'gen_ai.response.id': 'msg_ol',
  }).end();
  spanWith('Messages', {
    'openinference.span.kind': 'LLM',
    'llm.provider': 'anthropic',
    'llm.system': 'anthropic',
    'llm.model_name': 'claude-oi',
    'llm.input_messages.0.message.role': 'system',
    'llm.input_messages.0.message.content': 'You are terse.',
    'llm.input_messages.1.message.role': 'user',
    'llm.input_messages.1.message.content': 'Weather in Paris?',
    'llm.input_messages.2.message.role': 'assistant',
    'llm.input_messages.2.message.tool_calls.0.tool_call.id': 'toolu_1',
    'llm.input_messages.2.message.tool_calls.0.tool_call.function.name': 'get_weather',
    'llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments': '{"city":"Paris"}',
    'llm.input_messages.3.message.role': 'user',
    'llm.input_messages.3.message.tool_call_id': 'toolu_1',
    'llm.input_messages.3.message.content': 'sunny',
    'llm.output_messages.0.message.role': 'assistant',
    'llm.output_messages.0.message.content': 'It is sunny.',
    'llm.tools.0.tool.json_schema': JSON.stringify(CLAUDE_TOOL),
    'llm.token_count.prompt': 20,
    'llm.token_count.completion': 4,
  }).end();
}

/** OpenLLMetry: flat gen_ai.prompt.N.* / gen_ai.completion.N.* attributes. */
function recordOpenLLMetry(): void {
  spanWith('openai.chat', {
    'gen_ai.system': 'openai',
    'gen_ai.request.model': 'gpt-ol',
    'gen_ai.prompt.0.role': 'system',
    'gen_ai.prompt.0.content': 'be brief',
    'gen_ai.prompt.1.role': 'user',
    'gen_ai.prompt.1.content': 'look it up',
    'gen_ai.completion.0.role': 'assistant',
    'gen_ai.completion.0.finish_reason': 'tool_calls',
    'gen_ai.completion.0.tool_calls.0.id': 'c1',
    'gen_ai.completion.0.tool_calls.0.name': 'lookup',
    'gen_ai.completion.0.tool_calls.0.arguments': '{"q":1}',
    'llm.request.functions.0.name': 'lookup',
    'llm.request.functions.0.description': 'Looks up',
    'llm.request.functions.0.parameters': '{"type":"object"}',
    'gen_ai.usage.prompt_tokens': 11,
    'gen_ai.usage.completion_tokens': 3,
    'gen_ai.response.id': 'resp-openllmetry',
  }).end();
}

/** OpenInference: llm.input_messages.N.message.* attributes. */
function recordOpenInference(): void {
  spanWith('ChatOpenAI', {
    'openinference.span.kind': 'LLM',
    'llm.model_name': 'gpt-oi',
    'llm.provider': 'openai',
    'llm.input_messages.0.message.role': 'user',
    'llm.input_messages.0.message.content': 'hi',
    'llm.input_messages.1.message.role': 'assistant',
    'llm.input_messages.1.message.tool_calls.0.tool_call.id': 't9',
    'llm.input_messages.1.message.tool_calls.0.tool_call.function.name': 'f',
    'llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments': '{}',
    'llm.input_messages.2.message.role': 'tool',
    'llm.input_messages.2.message.tool_call_id': 't9',
    'llm.input_messages.2.message.content': 'done',
    'llm.output_messages.0.message.role': 'assistant',
    'llm.output_messages.0.message.content': 'hello',
    'llm.token_count.prompt': 5,
    'llm.token_count.completion': 1,
    'llm.tools.0.tool.json_schema': '{"type":"function","function":{"name":"f"}}',
  }).end();
}

/** The GenAI semantic conventions: messages as JSON in gen_ai.input.messages and gen_ai.output.messages. */
function recordGenAiSemconv(): void {
  spanWith('chat gpt-semconv', {
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'gpt-semconv',
    'gen_ai.system_instructions': JSON.stringify([{ type: 'text', content: 'be kind' }]),
    'gen_ai.input.messages': JSON.stringify([
      { role: 'user', parts: [{ type: 'text', content: 'add' }] },
      { role: 'assistant', parts: [{ type: 'tool_call', id: 'k1', name: 'add', arguments: { a: 1 } }] },
      { role: 'tool', parts: [{ type: 'tool_call_response', id: 'k1', response: '2' }] },
    ]),
    'gen_ai.output.messages': JSON.stringify([
      { role: 'assistant', parts: [{ type: 'text', content: 'it is 2' }], finish_reason: 'stop' },
    ]),
    'gen_ai.usage.input_tokens': 7,
    'gen_ai.usage.output_tokens': 4,
  }).end();
}

/** @opentelemetry/instrumentation-openai: content in log-record events joined by span id. */
function recordGenAiEvents(): void {
  const span = spanWith('chat gpt-events', {
    'gen_ai.system': 'openai',
    'gen_ai.request.model': 'gpt-events',
    'gen_ai.response.id': 'resp-events',
  });
  const ctx = trace.setSpan(ROOT_CONTEXT, span);
  const logger = loggerProvider.getLogger('@opentelemetry/instrumentation-openai');
  logger.emit({
    eventName: 'gen_ai.system.message',
    body: { content: 'sys' },
    context: ctx,
    attributes: { 'gen_ai.system': 'openai' },
  });
  logger.emit({ eventName: 'gen_ai.user.message', body: { content: 'q' }, context: ctx });
  logger.emit({
    eventName: 'gen_ai.choice',
    body: { index: 0, finish_reason: 'stop', message: { content: 'a' } },
    context: ctx,
  });
  span.end();
}

/** agl's capture of a chat call to `model`, asked `question`, answered 'once' with response id `id`. */
const chatCapture = (model: string, question: string, id: string): Attributes => ({
  'agl.llm.api': 'chat',
  'agl.llm.request': JSON.stringify({ model, messages: [{ role: 'user', content: question }] }),
  'agl.llm.response': JSON.stringify({
    id,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'once' }, finish_reason: 'stop' }],
  }),
});

/** A framework's LLM span with agl's HTTP-level capture as its child: one call, one row. */
function recordFrameworkOverCapture(): void {
  const framework = spanWith('framework llm', {
    'openinference.span.kind': 'LLM',
    'llm.input_messages.0.message.role': 'user',
    'llm.input_messages.0.message.content': 'twice?',
  });
  spanWith('chat m', chatCapture('m', 'twice?', 'x1'), trace.setSpan(ROOT_CONTEXT, framework)).end();
  framework.end();
  // An instrumentation's span of another call beside agl's capture of it, not its parent: the
  // same response id tells that they are one call.
  spanWith('framework chat', {
    'gen_ai.system': 'openai',
    'gen_ai.request.model': 'm2',
    'gen_ai.response.id': 'x2',
    'gen_ai.prompt.0.role': 'user',
    'gen_ai.prompt.0.content': 'by id?',
    'gen_ai.completion.0.role': 'assistant',
    'gen_ai.completion.0.content': 'once',
  }).end();
  spanWith('chat m2', chatCapture('m2', 'by id?', 'x2')).end();
}

const call = async (model: string) => {
  const { rows } = await agl.store.query(`SELECT * FROM llm_calls WHERE model = '${model}'`, { guard: false });
  assert.equal(rows.length, 1, `one row for ${model}`);
  const row = rows[0];
  for (const key of ['input_messages', 'output_messages', 'tools']) {
    const value = row[key];
    if (typeof value === 'string') row[key] = JSON.parse(value);
  }
  return row;
};

test('OpenLLMetry gen_ai.prompt.N.* attributes', async () => {
  const row = await call('gpt-ol');
  assert.deepEqual(row.input_messages, [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: 'look it up' },
  ]);
  assert.deepEqual(row.output_messages, [
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{"q":1}' } }],
    },
  ]);
  assert.deepEqual(row.tools, [
    { type: 'function', function: { name: 'lookup', description: 'Looks up', parameters: { type: 'object' } } },
  ]);
  assert.deepEqual(
    [row.provider, row.input_tokens, row.output_tokens, row.finish_reason, row.response_id],
    ['openai', 11, 3, 'tool_calls', 'resp-openllmetry'],
  );
});

test('OpenInference llm.input_messages.N.message.* attributes', async () => {
  const row = await call('gpt-oi');
  assert.deepEqual(row.input_messages, [
    { role: 'user', content: 'hi' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 't9', type: 'function', function: { name: 'f', arguments: '{}' } }],
    },
    { role: 'tool', content: 'done', tool_call_id: 't9' },
  ]);
  assert.deepEqual(row.output_messages, [{ role: 'assistant', content: 'hello' }]);
  assert.deepEqual(row.tools, [{ type: 'function', function: { name: 'f' } }]);
  assert.deepEqual([row.provider, row.input_tokens, row.output_tokens], ['openai', 5, 1]);
});

test('OpenTelemetry GenAI gen_ai.input.messages (parts format)', async () => {
  const row = await call('gpt-semconv');
  assert.deepEqual(row.input_messages, [
    { role: 'system', content: 'be kind' },
    { role: 'user', content: 'add' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'k1', type: 'function', function: { name: 'add', arguments: '{"a":1}' } }],
    },
    { role: 'tool', content: '2', tool_call_id: 'k1' },
  ]);
  assert.deepEqual(row.output_messages, [{ role: 'assistant', content: 'it is 2' }]);
  assert.deepEqual([row.input_tokens, row.output_tokens, row.finish_reason], [7, 4, 'stop']);
});

test("OpenLLMetry's and OpenInference's Anthropic calls: the rows agl's capture gives", async () => {
  const columns = (row: Record<string, unknown>) => ({
    provider: row.provider,
    input_messages: row.input_messages,
    output_messages: row.output_messages,
    tools: row.tools,
    input_tokens: row.input_tokens,
    output_tokens: row.output_tokens,
  });
  const captured = await call('claude-agl');
  assert.deepEqual(captured.input_messages, [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Weather in Paris?' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'toolu_1', content: 'sunny' },
  ]);
  const openllmetry = await call('claude-ol');
  assert.deepEqual(columns(openllmetry), columns(captured));
  assert.deepEqual([openllmetry.finish_reason, captured.finish_reason], ['stop', 'stop']);
  // OpenInference records no stop reason.
  assert.deepEqual(columns(await call('claude-oi')), columns(captured));
});

test('GenAI log-record events joined to their span', async () => {
  const row = await call('gpt-events');
  assert.deepEqual(row.input_messages, [
    { role: 'system', content: 'sys' },
    { role: 'user', content: 'q' },
  ]);
  assert.deepEqual(row.output_messages, [{ role: 'assistant', content: 'a' }]);
  assert.deepEqual([row.finish_reason, row.response_id], ['stop', 'resp-events']);
});

test('a call described by a framework span (its parent, or by response id) and by agl capture is one row, the exact one', async () => {
  const { rows } = await agl.store.query(
    `SELECT model, output_messages FROM llm_calls c JOIN spans s USING (span_id) WHERE s.name IN ('framework llm', 'chat m')`,
    { guard: false },
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0].model, 'm');
  const byId = await agl.store.query(
    `SELECT s.name FROM llm_calls c JOIN spans s USING (span_id) WHERE s.name IN ('framework chat', 'chat m2')`,
    { guard: false },
  );
  assert.deepEqual(byId.rows, [{ name: 'chat m2' }]);
});

test('derivation (idle-time or deriveAll) changes no row of llm_calls or rewards, only where they come from', async () => {
  const all = async () => (await agl.store.query('SELECT * FROM llm_calls ORDER BY span_id', { guard: false })).rows;
  const rewards = async () => (await agl.store.query('SELECT * FROM rewards ORDER BY span_id', { guard: false })).rows;
  const before = [await all(), await rewards()];
  const { rows: none } = await agl.store.query('SELECT count(*)::INTEGER AS n FROM derived_calls', { guard: false });
  assert.equal(none[0].n, 0, 'read on the fly so far');
  await agl.store.deriveAll();
  assert.equal(await agl.store.deriveAll(), 0, 'nothing left to derive');
  const { rows } = await agl.store.query(
    "SELECT (SELECT count(*) FROM derived_calls)::INTEGER AS calls, (SELECT value FROM agl_meta WHERE key = 'derived_through') AS through",
    { guard: false },
  );
  assert.ok(Number(rows[0].calls) >= 4, 'the calls are derived');
  assert.deepEqual([await all(), await rewards()], before);
});

test('while every span is derived, reads plan the views over the derived tables; a span after them is read at once', async () => {
  const searchPath = async () => (await agl.store.query(LLM_CALLS_SEARCH_PATH, { guard: false })).rows[0].path;
  await agl.store.deriveAll();
  assert.equal(await searchPath(), 'derived_only,main');
  // A read that names none of the views those checks decide is planned as written, unchecked.
  const plain = "SELECT current_setting('search_path') AS path, count(*)::INTEGER AS n FROM spans WHERE false";
  assert.deepEqual((await agl.store.query(plain, { guard: false })).rows, [{ path: '', n: 0 }]);
  // The Anthropic dialects' rows read back the same from the derived tables alone.
  await call('claude-ol');
  const span = spanWith('chat gpt-late', {
    'gen_ai.system': 'openai',
    'gen_ai.request.model': 'gpt-late',
    'gen_ai.prompt.0.role': 'user',
    'gen_ai.prompt.0.content': 'one more',
  });
  span.end();
  await tracerProvider.forceFlush();
  assert.equal(await searchPath(), 'fresh_calls_table,main');
  assert.deepEqual((await call('gpt-late')).input_messages, [{ role: 'user', content: 'one more' }]);
});

test('while a span waits, a read of llm_calls reads the stored calls in place, only the columns it needs', async () => {
  // The view's own CTE of the calls not derived yet kept DuckDB from pruning the columns below
  // it: a count read every stored call's messages and token ids, and held them in its dedup.
  assert.ok(
    Number((await agl.store.query('SELECT count(*) AS n FROM underived_spans', { guard: false })).rows[0].n) > 0,
  );
  const { rows } = await agl.store.query('EXPLAIN (FORMAT json) SELECT count(*), sum(output_tokens) FROM llm_calls', {
    guard: false,
  });
  const scans: string[][] = [];
  const walk = (node: { extra_info?: Record<string, unknown>; children?: unknown[] }) => {
    const { Table: table, Projections: projections } = node.extra_info ?? {};
    if (/(^|\.)derived_calls$/.test(String(table))) scans.push([projections].flat() as string[]);
    for (const child of node.children ?? []) walk(child as typeof node);
  };
  for (const plan of JSON.parse(String(rows[0].explain_value))) walk(plan);
  assert.ok(scans.length > 0, 'the plan reads derived_calls');
  for (const columns of scans)
    for (const unread of ['prompt_token_ids', 'response_logprobs', 'tools', 'parameters'])
      assert.ok(!columns.includes(unread), `a scan of derived_calls reads ${unread}: ${columns.join(', ')}`);
});
