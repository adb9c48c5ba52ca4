import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { spanRows, type SpanInput } from '../../src/store/span-json.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';
import {
  json,
  newTempDir,
  queryRows,
  removeDir,
  spawnServe,
  startAgl,
  type InProcessAgl,
  type SpawnedServe,
  until,
} from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// agl's own recording in OpenTelemetry's GenAI form, for other backends: agl/register and the
// gateway add the documents (span attributes, an operation.details log record or span event)
// as OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks. What a backend that knows only the
// GenAI conventions reads of them (the same spans without agl's own attributes) is what agl
// reads of the exact exchange.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;
let claude: AnthropicTestServer;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(`${dir}/agl.duckdb`);
  llm = await startOpenAITestServer();
  claude = await startAnthropicTestServer();
});
after(async () => {
  await claude.close();
  await llm.close();
  await agl.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);

/** Runs an agent under agl/register, to this file's models, as `service`; fails the test if the agent fails. */
async function runAgent(app: string, service: string, env: Record<string, string>): Promise<void> {
  const run = await runApp(app, {
    AGL_ENDPOINT: agl.url,
    OPENAI_BASE_URL: llm.baseURL,
    ANTHROPIC_BASE_URL: claude.url,
    OTEL_SERVICE_NAME: service,
    ...env,
  });
  assert.equal(run.code, 0, run.stderr);
}

/** A message as both readings must agree on it: role, text, tool calls (arguments parsed), tool result. */
function essentials(message: Record<string, unknown>) {
  const calls = (message.tool_calls as { id: string; function: { name: string; arguments: string } }[]) ?? [];
  return {
    role: message.role,
    content: message.content ?? null,
    tool_calls: calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]),
    tool_call_id: message.tool_call_id ?? null,
  };
}

/**
 * The service's LLM spans as a backend that knows only the GenAI conventions has them: the
 * same spans, agl's own `agl.*` attributes left out, stored in traces of their own; returns
 * the pairs of llm_calls rows (agl's reading, the conventions' reading).
 */
async function bothReadings(service: string): Promise<[Record<string, unknown>, Record<string, unknown>][]> {
  const spans = await rows(
    `SELECT trace_id, span_id, name, attributes, epoch_ns(start_time) AS s, epoch_ns(end_time) AS e FROM spans
     WHERE service_name = '${service}' AND (attributes->>'gen_ai.input.messages') IS NOT NULL ORDER BY start_time`,
  );
  assert.ok(spans.length > 0, `${service} recorded GenAI documents`);
  const copies: SpanInput[] = spans.map((span, i) => {
    const attributes = Object.fromEntries(
      // The response id too: agl would take the copy for a second record of its own call.
      Object.entries(json(span.attributes) as Record<string, unknown>).filter(
        ([key]) => !key.startsWith('agl.') && key !== 'gen_ai.response.id',
      ),
    );
    return {
      rollout_id: null,
      attempt_id: null,
      sequence_id: null,
      trace_id: `${String(i).padStart(4, '0')}${String(span.trace_id).slice(4)}`,
      span_id: String(span.span_id),
      parent_id: null,
      name: String(span.name),
      kind: 'CLIENT',
      status: { status_code: 'UNSET', description: null },
      attributes,
      events: [],
      links: [],
      start_time: Number(span.s) / 1e9,
      end_time: Number(span.e) / 1e9,
      context: null,
      parent: null,
      resource: { attributes: { 'service.name': `${service}-copy` }, schema_url: '' },
    };
  });
  await agl.store.writeSpans(spanRows(...copies), 0);
  const columns = 'trace_id, input_messages, output_messages, tools, model, input_tokens, output_tokens, finish_reason';
  return Promise.all(
    spans.map(async (span, i) => {
      const [own] = await rows(
        `SELECT ${columns} FROM llm_calls WHERE span_id = '${span.span_id}' AND trace_id = '${span.trace_id}'`,
      );
      const [copy] = await rows(`SELECT ${columns} FROM llm_calls WHERE trace_id = '${copies[i].trace_id}'`);
      return [own, copy] as [Record<string, unknown>, Record<string, unknown>];
    }),
  );
}

function assertSameCall(
  [own, copy]: [Record<string, unknown>, Record<string, unknown>],
  finish: (r: unknown) => unknown,
) {
  const messages = (column: unknown) => (json(column) as Record<string, unknown>[]).map(essentials);
  assert.deepEqual(messages(copy.input_messages), messages(own.input_messages));
  assert.deepEqual(messages(copy.output_messages), messages(own.output_messages));
  assert.deepEqual(json(copy.tools), json(own.tools));
  assert.deepEqual(
    [copy.model, copy.input_tokens, copy.output_tokens, finish(copy.finish_reason)],
    [own.model, own.input_tokens, own.output_tokens, own.finish_reason],
  );
}

test('agl/register with SPAN_AND_EVENT: documents on the span and an operation.details log record, read as agl reads the exchange', async () => {
  await runAgent('openai-chat.mjs', 'genai-both', {
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'SPAN_AND_EVENT',
  });
  const pairs = await bothReadings('genai-both');
  assert.equal(pairs.length, 2);
  // Each call one row: the log record agl wrote does not make a second.
  const calls = await rows(
    `SELECT count(*)::INTEGER AS n FROM llm_calls JOIN spans USING (trace_id, span_id) WHERE service_name = 'genai-both'`,
  );
  assert.deepEqual(calls, [{ n: 2 }]);
  for (const pair of pairs) assertSameCall(pair, (reason) => reason);
  // The tool definitions in the conventions' own shape on the span.
  const [definitions] = await rows(
    `SELECT attributes->>'gen_ai.tool.definitions' AS tools, attributes->>'gen_ai.system' AS older FROM spans
     WHERE service_name = 'genai-both' AND (attributes->>'gen_ai.tool.definitions') IS NOT NULL`,
  );
  assert.deepEqual(json(definitions.tools), [
    {
      type: 'function',
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  ]);
  // The older conventions' gen_ai.system beside gen_ai.provider.name, unless the latest alone is asked for.
  assert.equal(definitions.older, 'openai_compatible');
  // One log record per call, tied to its span, the documents as structured values.
  const records = await rows(
    `SELECT l.attributes FROM logs l JOIN spans s USING (trace_id, span_id)
     WHERE s.service_name = 'genai-both' AND l.event_name = 'gen_ai.client.inference.operation.details' ORDER BY l.time`,
  );
  assert.equal(records.length, 2);
  const first = json(records[0].attributes) as Record<string, unknown>;
  assert.equal(first['gen_ai.operation.name'], 'chat');
  assert.ok(Array.isArray(first['gen_ai.input.messages']));
  assert.ok(Array.isArray(first['gen_ai.output.messages']));
});

test('agl/register with the latest conventions alone and no GenAI content: no gen_ai.system, no documents', async () => {
  await runAgent('openai-chat.mjs', 'genai-latest', { OTEL_SEMCONV_STABILITY_OPT_IN: 'gen_ai_latest_experimental' });
  const spans = await rows(
    `SELECT attributes->>'gen_ai.system' AS older, attributes->>'gen_ai.provider.name' AS provider,
       attributes->>'gen_ai.input.messages' AS messages
     FROM spans WHERE service_name = 'genai-latest' AND (attributes->>'agl.llm.api') IS NOT NULL`,
  );
  assert.equal(spans.length, 2);
  for (const span of spans) assert.deepEqual(span, { older: null, provider: 'openai_compatible', messages: null });
});

test("an Anthropic agent's calls, as documents on the span, read as agl reads the exchange", async () => {
  await runAgent('anthropic-agent.mjs', 'genai-claude', {
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'SPAN_ONLY',
  });
  const pairs = await bothReadings('genai-claude');
  assert.ok(pairs.length >= 2);
  // The conventions keep the provider's stop reason; agl's reading of the exchange gives chat's.
  const chat: Record<string, string> = { end_turn: 'stop', tool_use: 'tool_calls', max_tokens: 'length' };
  for (const pair of pairs) assertSameCall(pair, (reason) => chat[String(reason)] ?? reason);
});

test('the gateway with SPAN_AND_EVENT: documents on its span and as a span event', async () => {
  const previous = process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT;
  process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = 'SPAN_AND_EVENT';
  let serve: SpawnedServe;
  try {
    serve = await spawnServe(['--db', `${dir}/gateway.duckdb`, '--upstream', llm.baseURL]);
  } finally {
    if (previous === undefined) delete process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT;
    else process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = previous;
  }
  try {
    const client = new OpenAI({ baseURL: `${serve.url}/v1/gateway/v1`, apiKey: 'agent-key' });
    await client.chat.completions.create({
      model: 'test-model',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hello there' },
      ],
    });
    // The gateway writes its spans a moment after the answer: asked until they are there.
    let answer: { rows: Record<string, unknown>[] } = { rows: [] };
    await until(async () => {
      const query = await fetch(`${serve.url}/v1/agl/query`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          sql: `SELECT s.attributes->>'gen_ai.input.messages' AS input, s.attributes->>'gen_ai.output.messages' AS output,
            s.events->0->>'name' AS event FROM spans s JOIN llm_calls c USING (trace_id, span_id)`,
        }),
      });
      answer = (await query.json()) as typeof answer;
      assert.equal(answer.rows.length, 1, JSON.stringify(answer));
    }, 10_000);
    const [row] = answer.rows;
    assert.deepEqual(json(row.input), [
      { role: 'system', parts: [{ type: 'text', content: 'Be brief.' }] },
      { role: 'user', parts: [{ type: 'text', content: 'hello there' }] },
    ]);
    assert.deepEqual(json(row.output), [
      { role: 'assistant', parts: [{ type: 'text', content: 'Echo: hello there' }], finish_reason: 'stop' },
    ]);
    assert.equal(row.event, 'gen_ai.client.inference.operation.details');
  } finally {
    serve.child.kill('SIGTERM');
    await serve.exited;
  }
});
