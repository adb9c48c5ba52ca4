import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { newTempDir, removeDir, startAgl, type InProcessAgl } from './helpers.js';
import { runApp } from './instrumented-app.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from './openai-server.js';

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

const rows = async (sql: string) => (await agl.store.query(sql, { guard: false })).rows as any[];
const json = (value: unknown) => (typeof value === 'string' ? JSON.parse(value) : value);

/** Runs an app with a service name of its own, so each test reads only its spans. */
async function run(app: string, service: string, env: Record<string, string> = {}) {
  const result = await runApp(app, { AGL_ENDPOINT: agl.url, OPENAI_BASE_URL: llm.baseURL, OTEL_SERVICE_NAME: service, ...env });
  return result;
}

describe('openai apps under --import agl/register', () => {
  test('an ESM app: tool call, streamed answer and reward land in llm_calls and rewards, with token ids', async () => {
    const result = await run('openai-chat.mjs', 'esm-chat', { AGL_RETURN_TOKEN_IDS: '1' });
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), { toolCall: { name: 'get_weather', arguments: '{"city":"Paris"}' }, text: 'Echo: thanks' });

    const calls = await rows(`SELECT c.* FROM llm_calls c JOIN spans s USING (span_id) WHERE s.service_name = 'esm-chat' ORDER BY c.start_time`);
    assert.equal(calls.length, 2);
    const [tool, streamed] = calls;
    assert.equal(tool.model, 'test-model');
    assert.deepEqual(json(tool.input_messages), [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Paris?' },
    ]);
    assert.deepEqual(json(tool.output_messages)[0].tool_calls, [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }]);
    assert.equal(json(tool.tools)[0].function.name, 'get_weather');
    assert.equal(tool.finish_reason, 'tool_calls');
    assert.deepEqual(tool.prompt_token_ids, testTokenIds('You are terse.\nWeather in Paris?'));
    assert.deepEqual(tool.response_token_ids, testTokenIds('{"city":"Paris"}'));

    assert.deepEqual(json(streamed.output_messages), [{ role: 'assistant', content: 'Echo: thanks' }]);
    assert.equal(streamed.finish_reason, 'stop');
    assert.deepEqual(streamed.response_token_ids, testTokenIds('Echo: thanks'));
    assert.equal(streamed.output_tokens, 2);
    assert.ok(String(streamed.response_id).startsWith('chatcmpl-'));
    assert.equal(json(streamed.input_messages)[2].tool_call_id, 'call_1');

    const rewards = await rows(`SELECT r.* FROM rewards r JOIN spans s USING (span_id) WHERE s.service_name = 'esm-chat'`);
    assert.deepEqual(rewards.map((r) => [r.name, r.value, r.is_primary]), [['primary', 0.75, true]]);
    // The test server saw the token-id request agl added.
    assert.ok(llm.requests.filter((r) => r.body.return_token_ids === true).length >= 2);
  });
});
