import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  newTempDir,
  removeDir,
  startAgl,
  type InProcessAgl,
  queryRows,
  json,
  messagesIn,
  objectIn,
  toolsIn,
} from '../support/helpers.js';
import { APPS, runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from '../support/openai-server.js';

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(`${dir}/agl.duckdb`);
  llm = await startOpenAITestServer();
});
after(async () => {
  await llm.close();
  await agl.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);

/** Runs an app with a service name of its own, so each test reads only its spans. */
async function run(app: string, service: string, env: Record<string, string> = {}) {
  const result = await runApp(app, {
    AGL_ENDPOINT: agl.url,
    OPENAI_BASE_URL: llm.baseURL,
    OTEL_SERVICE_NAME: service,
    ...env,
  });
  return result;
}

describe('openai apps under --import agl/register', () => {
  test('an ESM app: tool call, streamed answer and reward land in llm_calls and rewards, with token ids', async () => {
    const result = await run('openai-chat.mjs', 'esm-chat', { AGL_RETURN_TOKEN_IDS: '1' });
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), {
      toolCall: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      text: 'Echo: thanks',
    });

    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'esm-chat' ORDER BY c.start_time`,
    );
    assert.equal(calls.length, 2);
    const [tool, streamed] = calls;
    assert.equal(tool.model, 'test-model');
    assert.deepEqual(json(tool.input_messages), [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Paris?' },
    ]);
    assert.deepEqual(messagesIn(tool.output_messages)[0].tool_calls, [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ]);
    assert.equal(toolsIn(tool.tools)[0].function.name, 'get_weather');
    assert.equal(tool.finish_reason, 'tool_calls');
    assert.deepEqual(tool.prompt_token_ids, testTokenIds('You are terse.\nWeather in Paris?'));
    assert.deepEqual(tool.response_token_ids, testTokenIds('{"city":"Paris"}'));

    assert.deepEqual(json(streamed.output_messages), [{ role: 'assistant', content: 'Echo: thanks' }]);
    assert.equal(streamed.finish_reason, 'stop');
    assert.deepEqual(streamed.response_token_ids, testTokenIds('Echo: thanks'));
    assert.equal(streamed.output_tokens, 2);
    assert.ok(String(streamed.response_id).startsWith('chatcmpl-'));
    assert.equal(messagesIn(streamed.input_messages)[2].tool_call_id, 'call_1');

    const rewards = await rows(
      `SELECT r.* FROM rewards r JOIN spans s USING (span_id) WHERE s.service_name = 'esm-chat'`,
    );
    assert.deepEqual(
      rewards.map((r) => [r.name, r.value, r.is_primary]),
      [['primary', 0.75, true]],
    );
    // The test server saw the token-id request agl added.
    assert.ok(llm.requests.filter((r) => r.body.return_token_ids === true).length >= 2);
  });

  for (const pkg of ['openai5', 'openai6']) {
    test(`a CommonJS app on ${pkg}: calls recorded, named rewards primary first, exit code kept`, async () => {
      const service = `cjs-${pkg}`;
      const result = await run('cjs-chat.cjs', service, { OPENAI_PACKAGE: pkg });
      assert.equal(result.code, 3, result.stderr);
      assert.deepEqual(JSON.parse(result.stdout), { plain: 'Echo: hello cjs', text: 'Echo: stream cjs' });
      const calls = await rows(
        `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = '${service}' ORDER BY c.start_time`,
      );
      assert.deepEqual(
        calls.map((c) => messagesIn(c.output_messages)[0].content),
        ['Echo: hello cjs', 'Echo: stream cjs'],
      );
      assert.deepEqual(
        calls.map((c) => c.input_tokens),
        [2, null],
        'a stream without include_usage has no usage',
      );
      const rewards = await rows(
        `SELECT r.* FROM rewards r JOIN spans s USING (span_id) WHERE s.service_name = '${service}' ORDER BY r.name`,
      );
      assert.deepEqual(
        rewards.map((r) => [r.name, r.value, r.is_primary]),
        [
          ['brevity', 0.5, false],
          ['correct', 1, true],
        ],
      );
    });
  }

  test('raw fetch to the completions API: plain, streamed and failed calls; other requests are HTTP spans', async () => {
    const result = await run('fetch-completions.mjs', 'raw-fetch', {
      AGL_RETURN_TOKEN_IDS: '1',
      AGL_ROLLOUT_ID: 'ro-env',
      AGL_ATTEMPT_ID: 'at-env',
    });
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), { plain: ' Echo: one two', chunks: 6, failed: 503 });
    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'raw-fetch' ORDER BY c.start_time`,
    );
    assert.equal(calls.length, 5);
    // Read by the app with arrayBuffer() and through body: recorded all the same.
    assert.deepEqual(
      calls.slice(3).map((c) => json(c.output_messages)),
      [[{ role: 'assistant', content: ' Echo: five six' }], [{ role: 'assistant', content: ' Echo: seven eight' }]],
    );
    assert.deepEqual(json(calls[0].input_messages), [{ role: 'user', content: 'one two' }]);
    assert.deepEqual(json(calls[1].output_messages), [{ role: 'assistant', content: ' Echo: three four' }]);
    assert.deepEqual(calls[1].response_token_ids, testTokenIds(' Echo: three four'));
    assert.deepEqual(calls[1].prompt_token_ids, testTokenIds('three four'));
    assert.ok(calls.every((c) => c.rollout_id === 'ro-env' && c.attempt_id === 'at-env'));
    const [failed] = await rows(
      `SELECT status_code, status_message, attributes->>'error.type' AS error FROM spans WHERE service_name = 'raw-fetch' AND name = 'text_completion error-503'`,
    );
    assert.deepEqual(failed, { status_code: 'ERROR', status_message: 'test server answers 503', error: '503' });
    const [unread] = await rows(
      `SELECT attributes->>'http.response.status_code' AS status FROM spans WHERE service_name = 'raw-fetch' AND name = 'embeddings test-model'`,
    );
    assert.deepEqual(unread, { status: '200' }, 'an answer never read is recorded, and is no LLM call');
    const http = await rows(
      `SELECT name, attributes->>'http.response.status_code' AS status FROM spans WHERE service_name = 'raw-fetch' AND name = 'GET'`,
    );
    assert.deepEqual(http, [{ name: 'GET', status: '200' }]);
  });

  test('with content capture off, calls keep usage and ids but no messages', async () => {
    await run('fetch-completions.mjs', 'no-content', { AGL_CAPTURE_CONTENT: '0' });
    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'no-content' ORDER BY c.start_time`,
    );
    assert.equal(calls.length, 5);
    assert.equal(calls[0].input_messages, null);
    assert.equal(calls[0].output_messages, null);
    assert.equal(calls[0].output_tokens, testTokenIds(' Echo: one two').length);
    assert.match(String(calls[0].response_id), /^cmpl-/);
  });
});

describe('LangChain.js', () => {
  test('an agent with a tool: the run tree is the span tree, one llm_calls row per model call', async () => {
    const result = await run('langchain-agent.mjs', 'langchain');
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), { answer: 'Echo: Weather in Paris?', messages: 4 });
    const spans = await rows(
      `SELECT span_id, parent_id, trace_id, name, attributes FROM spans WHERE service_name = 'langchain' AND name <> 'agentlightning.annotation'`,
    );
    const byId = new Map(spans.map((s) => [s.span_id, s]));
    const roots = spans.filter((s) => s.parent_id === null);
    assert.deepEqual(
      roots.map((s) => s.name),
      ['LangGraph'],
    );
    assert.equal(new Set(spans.map((s) => s.trace_id)).size, 1);

    const tool = spans.find((s) => s.name === 'execute_tool get_weather');
    assert.ok(tool);
    assert.equal(objectIn(tool.attributes)['gen_ai.tool.call.arguments'], '{"city":"Paris"}');
    assert.equal(objectIn(tool.attributes)['gen_ai.tool.call.result'], 'It is sunny in Paris.');
    assert.equal(byId.get(tool.parent_id)?.name, 'tools');

    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'langchain' ORDER BY c.start_time`,
    );
    assert.equal(calls.length, 2);
    for (const call of calls) {
      const span = byId.get(call.span_id);
      assert.equal(
        byId.get(span?.parent_id)?.name,
        'ChatOpenAI',
        'the HTTP-level call is a child of its chat-model run',
      );
    }
    assert.equal(messagesIn(calls[0].output_messages)[0].tool_calls?.[0].function.name, 'get_weather');
    const secondInput = messagesIn(calls[1].input_messages);
    assert.deepEqual(secondInput.at(-1), {
      role: 'tool',
      content: 'It is sunny in Paris.',
      name: 'get_weather',
      tool_call_id: 'call_1',
    });
  });
});

describe('attribution and delivery', () => {
  test('20 concurrent rollouts in one process: every call and reward lands in its own rollout', async () => {
    const result = await run('concurrent-rollouts.mjs', 'concurrent');
    assert.equal(result.code, 0, result.stderr);
    const calls = await rows(
      `SELECT c.rollout_id, c.attempt_id, c.input_messages FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'concurrent' ORDER BY c.rollout_id`,
    );
    assert.equal(calls.length, 20);
    for (const call of calls) {
      const i = String(call.rollout_id).slice(3);
      assert.equal(call.attempt_id, `at-${i}`);
      assert.equal(messagesIn(call.input_messages)[0].content, `task ${i}`);
    }
    const rewards = await rows(
      `SELECT r.rollout_id, r.value FROM rewards r JOIN spans s USING (span_id) WHERE s.service_name = 'concurrent'`,
    );
    assert.equal(rewards.length, 20);
    for (const reward of rewards) assert.equal(reward.value, Number(String(reward.rollout_id).slice(3)) / 10);
  });

  test('SIGTERM: the spans of a stopped agent arrive, and it still dies of the signal', async () => {
    const result = await runApp(
      'signal.mjs',
      { AGL_ENDPOINT: agl.url, OPENAI_BASE_URL: llm.baseURL, OTEL_SERVICE_NAME: 'signalled' },
      { signalAfter: [/called/, 'SIGTERM'] },
    );
    assert.equal(result.signal, 'SIGTERM');
    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'signalled'`,
    );
    assert.equal(calls.length, 1);
  });

  test('process.exit() right after the last call and reward: both still arrive, the exit code is kept', async () => {
    const result = await run('exit-now.mjs', 'exit-now');
    assert.equal(result.code, 5, result.stderr);
    const calls = await rows(
      `SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'exit-now'`,
    );
    assert.equal(calls.length, 1);
    // Recorded whole: the answer the app had, not only the request.
    assert.match(String(messagesIn(calls[0].output_messages)[0].content), /Echo: last call/);
    assert.equal(calls[0].model, 'test-model');
    const rewards = await rows(
      `SELECT r.value FROM rewards r JOIN spans s USING (span_id) WHERE s.service_name = 'exit-now'`,
    );
    assert.deepEqual(rewards, [{ value: 0.25 }]);
  });

  test('a burst of 20,000 spans neither crashes nor hangs the app', async () => {
    const result = await run('burst.mjs', 'burst');
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout.trim(), 'created');
    const [{ n }] = await rows(`SELECT count(*)::INTEGER AS n FROM spans WHERE service_name = 'burst'`);
    assert.ok(typeof n === 'number' && n > 0 && n <= 20_000, `${n} spans`);
  });

  test('collector down: the app runs and exits as always, agl says so once on stderr', async () => {
    const down = 'http://127.0.0.1:9'; // the discard port: nothing listens there
    const result = await runApp('openai-chat.mjs', { AGL_ENDPOINT: down, OPENAI_BASE_URL: llm.baseURL });
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), {
      toolCall: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      text: 'Echo: thanks',
    });
    assert.equal(result.stderr.match(/agl: cannot send spans/g)?.length, 1, result.stderr);

    const burst = await runApp('burst.mjs', { AGL_ENDPOINT: down });
    assert.equal(burst.code, 0, burst.stderr);

    const logging = await runApp('otel-signals.mjs', { AGL_ENDPOINT: down });
    assert.equal(logging.code, 0, logging.stderr);
    assert.equal(logging.stdout.trim(), 'done');
    assert.equal(logging.stderr.match(/agl: cannot send log records/g)?.length, 1, logging.stderr);
  });

  test('a bad endpoint is reported and the app runs unrecorded; without agl/register the app is unchanged', async () => {
    const bad = await runApp('fetch-completions.mjs', { AGL_ENDPOINT: 'not a url', OPENAI_BASE_URL: llm.baseURL });
    assert.equal(bad.code, 0);
    assert.match(bad.stderr, /agl: the collector endpoint is not a URL: "not a url\/v1\/traces"/);
    const plain = await runApp('openai-chat.mjs', { OPENAI_BASE_URL: llm.baseURL }, { register: false });
    assert.equal(plain.code, 0, plain.stderr);
    assert.deepEqual(JSON.parse(plain.stdout), {
      toolCall: { name: 'get_weather', arguments: '{"city":"Paris"}' },
      text: 'Echo: thanks',
    });
    assert.match(plain.stderr, /emitReward|agentlightning.annotation is not recorded/);
  });

  test('an app that registered a tracer provider of its own first gets its LLM spans there, as the rest', async () => {
    const preload = `--import=${join(APPS, 'own-tracer-provider.mjs')}`;
    const result = await run('own-provider-chat.mjs', 'own-provider', { NODE_OPTIONS: preload });
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), ['chat test-model']);
    assert.deepEqual(await rows(`SELECT name FROM spans WHERE service_name = 'own-provider'`), []);
  });

  test('log records the app emits go where its spans go; its metrics go nowhere unless asked', async () => {
    // The standard endpoint variable points elsewhere: the OpenTelemetry SDK's defaults sent both there.
    const seen: string[] = [];
    const elsewhere = createServer((request, response) => {
      seen.push(`${request.method} ${request.url}`);
      request.resume().on('end', () => response.end());
    });
    await new Promise<void>((resolve) => elsewhere.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = elsewhere.address() as AddressInfo;
      const result = await run('otel-signals.mjs', 'otel-signals', {
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_METRIC_EXPORT_INTERVAL: '100',
      });
      assert.equal(result.code, 0, result.stderr);
      const records = await rows(
        `SELECT event_name, body, attributes->>'app.turn' AS turn FROM logs WHERE service_name = 'otel-signals'`,
      );
      assert.deepEqual(
        records.map((r) => ({ ...r, body: json(r.body) })),
        [{ event_name: 'app.answer', body: { text: 'forty-two' }, turn: '1' }],
      );
      assert.deepEqual(seen, [], 'nothing went to the standard endpoint');
    } finally {
      elsewhere.close();
    }
  });
});
