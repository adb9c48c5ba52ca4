import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  json,
  newTempDir,
  objectIn,
  queryRows,
  removeDir,
  runCli,
  startAgl,
  type InProcessAgl,
} from '../support/helpers.js';
import { runApp, type AppRun } from '../support/instrumented-app.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';

// A Claude agent under agl/register: the real @anthropic-ai/sdk and LangChain's ChatAnthropic,
// unchanged, against a server speaking Anthropic's JSON and SSE. What the clients got is what
// the spans, llm_calls and an SFT export hold.

let dir: string;
let agl: InProcessAgl;
let llm: AnthropicTestServer;
let run: AppRun;
let got: {
  plain: { id: string; content: unknown[] };
  streamed: { id: string; content: unknown[] };
  failure: unknown;
  cut: string;
  cutText: string;
  counted: { input_tokens: number };
  langchain: string;
};

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(`${dir}/agl.duckdb`);
  llm = await startAnthropicTestServer();
  run = await runApp('anthropic-agent.mjs', {
    AGL_ENDPOINT: agl.url,
    ANTHROPIC_BASE_URL: llm.url,
    OTEL_SERVICE_NAME: 'claude-agent',
  });
  assert.equal(run.code, 0, run.stderr);
  got = JSON.parse(run.stdout);
});
after(async () => {
  await llm.close();
  await agl.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);
const callsByModel = async () =>
  Object.fromEntries(
    (
      await rows(`SELECT c.*, s.attributes, s.status_code, s.status_message FROM llm_calls c JOIN spans s USING (trace_id, span_id)
      ORDER BY c.start_time`)
    ).map((row) => [String(row.model), row]),
  );

/** agl's span of a call (the SDK's own span of it has the same response id). */
const aglSpanOf = async (responseId: string) =>
  (
    await rows(
      `SELECT attributes FROM spans WHERE scope_name = 'agl' AND (attributes->>'gen_ai.response.id') = '${responseId}'`,
    )
  )[0];

describe('a Claude agent under agl/register', () => {
  test('the clients get what the server sent; count_tokens is no LLM call', async () => {
    assert.equal(got.failure, 529);
    assert.equal(got.cutText, 'Echo: ');
    assert.equal(got.langchain, 'Echo: Hello LangChain');
    assert.ok(got.counted.input_tokens > 0);
    const calls = await rows('SELECT count(*)::INTEGER AS n FROM llm_calls');
    assert.equal(calls[0].n, 5); // plain, streamed, error, cut, LangChain
    // The SDK's own span of the call, and agl's HTTP span under it.
    const counts = await rows(
      `SELECT name FROM spans WHERE attributes->>'url.full' LIKE '%count_tokens' ORDER BY start_time`,
    );
    assert.deepEqual(counts, [{ name: 'anthropic.messages.count_tokens' }, { name: 'POST' }]);
  });

  test('a tool call: system first, tool_use as tool_calls, tools as functions, usage with the cache', async () => {
    const [plain] = await rows(`SELECT * FROM llm_calls WHERE response_id = '${got.plain.id}'`);
    assert.equal(plain.provider, 'anthropic');
    assert.deepEqual(json(plain.input_messages), [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Paris?' },
    ]);
    assert.deepEqual(json(plain.output_messages), [
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
    ]);
    assert.deepEqual(json(plain.tools), [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather of a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ]);
    assert.equal(plain.finish_reason, 'tool_calls');
    // "You are terse. Weather in Paris?": 6 words, 3 of them read from the cache.
    assert.equal(plain.input_tokens, 6);
    assert.equal(plain.output_tokens, 1);
    const span = await aglSpanOf(got.plain.id);
    const attributes = objectIn(span.attributes);
    assert.equal(attributes['gen_ai.usage.cache_read.input_tokens'], 3);
    assert.deepEqual(JSON.parse(String(attributes['agl.llm.response'])), got.plain);
  });

  test('a streamed turn with a tool result: assembled as the client assembled it, thinking kept', async () => {
    const [call] = await rows(`SELECT * FROM llm_calls WHERE response_id = '${got.streamed.id}'`);
    assert.deepEqual(json(call.input_messages), [
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
      { role: 'user', content: 'thanks' },
    ]);
    assert.deepEqual(json(call.output_messages), [
      { role: 'assistant', content: 'Echo: thanks', reasoning_content: 'The user wants an echo.' },
    ]);
    assert.equal(call.finish_reason, 'stop');
    const span = await aglSpanOf(got.streamed.id);
    const attributes = objectIn(span.attributes);
    assert.equal(attributes['agl.llm.streamed'], true);
    const { parsed_output: _, ...message } = got.streamed as { parsed_output?: unknown }; // the SDK's own field
    assert.deepEqual(JSON.parse(String(attributes['agl.llm.response'])), message);
  });

  test('an error answer and a cut stream: the error recorded; what arrived kept, and said cut', async () => {
    const byModel = await callsByModel();
    const failed = byModel['error-529'];
    assert.equal(failed.status_code, 'ERROR');
    assert.equal(failed.status_message, 'test server answers 529');
    assert.equal(failed.output_messages, null);
    const cut = byModel['cut-stream'];
    assert.equal(cut.status_code, 'ERROR');
    assert.match(String(cut.status_message), /the response ended early/);
    assert.equal(objectIn(cut.attributes)['error.type'], 'stream_cut');
    assert.deepEqual(json(cut.output_messages), [{ role: 'assistant', content: 'Echo: ' }]);
  });

  test("LangChain's ChatAnthropic: one row, under its model run", async () => {
    const [call] = await rows(
      `SELECT c.*, s.parent_id AS parent FROM llm_calls c JOIN spans s USING (trace_id, span_id)
       WHERE json_extract_string(c.input_messages, '$[1].content') = 'Hello LangChain'`,
    );
    assert.deepEqual(json(call.output_messages), [{ role: 'assistant', content: 'Echo: Hello LangChain' }]);
    const [parent] = await rows(`SELECT name FROM spans WHERE span_id = '${call.parent}'`);
    assert.match(String(parent.name), /ChatAnthropic/);
  });

  test('agl export messages: the Claude transcripts as OpenAI fine-tuning records', async () => {
    const out = join(dir, 'sft.jsonl');
    const result = await runCli(['export', 'messages', '--url', agl.url, '--out', out]);
    assert.equal(result.code, 0, result.stderr);
    const records = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    const streamed = records.find((r) => r.messages.some((m: { role: string }) => m.role === 'tool'));
    assert.deepEqual(streamed.messages.at(-1), {
      role: 'assistant',
      content: 'Echo: thanks',
      reasoning_content: 'The user wants an echo.',
    });
    assert.equal(streamed.tools[0].function.name, 'get_weather');
  });
});
