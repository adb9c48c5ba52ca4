import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parseApoOptions } from '../../src/algorithms/apo/options.js';
import { parseGepaOptions } from '../../src/algorithms/gepa/options.js';
import { ChatModel } from '../../src/algorithms/shared/chat-model.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';

// APO's critic and editor on Anthropic's Messages API (a Claude critic for a Claude agent),
// against the Anthropic-compatible test server.

let server: AnthropicTestServer;
before(async () => {
  server = await startAnthropicTestServer();
});
after(() => server.close());

const policy = { retries: 0, backoffSeconds: 0.01, timeoutSeconds: 5 };

test('a Messages call: system apart, Anthropic headers, the text and usage of the answer', async () => {
  const model = new ChatModel(
    { api: 'anthropic', baseURL: server.url, apiKey: 'claude-key', model: 'claude-test' },
    policy,
  );
  const answer = await model.complete(
    [
      { role: 'system', content: 'You critique prompts.' },
      { role: 'user', content: 'Critique this prompt' },
    ],
    { temperature: 0.5, seed: 3 },
  );
  assert.equal(answer.content, 'Echo: Critique this prompt');
  assert.deepEqual(answer.usage, { inputTokens: 6, outputTokens: 4 });
  const [request] = server.requests;
  assert.equal(request.path, '/v1/messages');
  assert.equal(request.headers['x-api-key'], 'claude-key');
  assert.equal(request.headers['anthropic-version'], '2023-06-01');
  assert.equal(request.headers.authorization, undefined);
  const body = request.body as Record<string, unknown>;
  assert.equal(body.system, 'You critique prompts.');
  assert.deepEqual(body.messages, [{ role: 'user', content: 'Critique this prompt' }]);
  assert.equal(body.temperature, 0.5);
  assert.equal(body.seed, undefined, 'Anthropic has no seed');
  assert.equal(typeof body.max_tokens, 'number');
});

test("an Anthropic error answer fails with the error's message", async () => {
  const model = new ChatModel({ api: 'anthropic', baseURL: server.url, model: 'error-401' }, policy);
  await assert.rejects(
    model.complete([{ role: 'user', content: 'hi' }]),
    (error: Error & { tries?: number }) => error.tries === 1 && /answered 401/.test(error.message),
  );
});

test("modelApi anthropic takes Anthropic's endpoint and key from the environment, for APO and GEPA", () => {
  const saved = { url: process.env.ANTHROPIC_BASE_URL, key: process.env.ANTHROPIC_API_KEY };
  process.env.ANTHROPIC_BASE_URL = server.url;
  process.env.ANTHROPIC_API_KEY = 'from-env';
  try {
    const settings = parseApoOptions({ modelApi: 'anthropic', criticModel: 'claude-test' });
    assert.equal(settings.baseURL, server.url);
    assert.equal(settings.apiKey, 'from-env');
    assert.equal(parseApoOptions({}).modelApi, 'openai');
    assert.throws(() => parseApoOptions({ modelApi: 'gemini' }), /modelApi/);
    const gepa = parseGepaOptions({ modelApi: 'anthropic', reflectionModel: 'claude-test' });
    assert.deepEqual([gepa.modelApi, gepa.baseURL, gepa.apiKey], ['anthropic', server.url, 'from-env']);
  } finally {
    for (const [name, value] of [
      ['ANTHROPIC_BASE_URL', saved.url],
      ['ANTHROPIC_API_KEY', saved.key],
    ] as const)
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
  }
});
