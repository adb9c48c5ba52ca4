import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { gatewayBaseUrl, gatewayEnv } from '../../src/client/gateway-url.js';
import {
  newTempDir,
  removeDir,
  startAgl,
  type InProcessAgl,
  queryRows,
  eventually,
  json,
  messagesIn,
  toolsIn,
} from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, testTokenIds, type OpenAITestServer } from '../support/openai-server.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';

// The gateway between agents and a model server: what the agent gets, what the span holds.

let dir: string;
let agl: InProcessAgl;
let upstream: OpenAITestServer;
let other: OpenAITestServer;
let claude: AnthropicTestServer;

before(async () => {
  dir = await newTempDir();
  upstream = await startOpenAITestServer({ fixedIds: true });
  other = await startOpenAITestServer({ fixedIds: true });
  claude = await startAnthropicTestServer();
  agl = await startAgl(`${dir}/gateway.duckdb`, {
    maxBodyBytes: 64 * 1024,
    gateway: {
      upstream: upstream.baseURL,
      anthropicUpstream: claude.url,
      anthropicUpstreamKey: 'upstream-anthropic-key',
      timeoutMs: 1_000,
      returnTokenIds: true,
    },
  });
});
after(async () => {
  await agl.close();
  await upstream.close();
  await other.close();
  await claude.close();
  await removeDir(dir);
});

const rows = (sql: string) => queryRows(agl.store, sql);

/** A started rollout (with an attempt); `resources` become its own resources. */
async function startedRollout(resources?: Record<string, unknown>) {
  // Every rollout is pinned to resources of its own, so tests do not see each other's; without
  // an llm resource, calls go to --upstream.
  const resourcesId = (await agl.store.lightning.addResources((resources ?? {}) as never)).resources_id;
  const rollout = await agl.store.lightning.startRollout({ input: {}, resources_id: resourcesId });
  return {
    rolloutId: rollout.rollout_id,
    attemptId: rollout.attempt.attempt_id,
    resourcesId,
    baseURL: gatewayBaseUrl(agl.url, rollout.rollout_id, rollout.attempt.attempt_id),
  };
}

const callsOf = (rolloutId: string, count = 1) =>
  eventually(agl.store, `SELECT * FROM llm_calls WHERE rollout_id = '${rolloutId}' ORDER BY sequence_id`, count);

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

/** The message of an OpenAI-style error answer (`{"error": {"message": ...}}`). */
const errorMessage = async (answer: Response) =>
  ((await answer.json()) as { error: { message: string } }).error.message;

describe('recording through the gateway', () => {
  test('the openai client, plain with tools and streamed: answers as from the upstream, calls in llm_calls with token ids', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const client = new OpenAI({ baseURL, apiKey: 'agent-key' });
    const tools = [
      {
        type: 'function' as const,
        function: {
          name: 'lookup',
          parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
        },
      },
    ];
    const first = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'find it' }],
      tools,
    });
    assert.equal(
      first.choices[0].message.tool_calls?.[0].type === 'function' &&
        first.choices[0].message.tool_calls[0].function.name,
      'lookup',
    );
    const stream = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'say more' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Echo: say more');

    // The upstream got the gateway's token-id request, not the agent's key.
    const seen = upstream.requests.slice(-2);
    assert.ok(seen.every((r) => r.body.return_token_ids === true && r.headers.authorization === undefined));

    const calls = await callsOf(rolloutId, 2);
    assert.equal(calls.length, 2);
    assert.deepEqual(
      calls.map((c) => c.sequence_id),
      [1, 2],
      'sequence ids from the rollout counter',
    );
    assert.deepEqual(json(calls[0].input_messages), [{ role: 'user', content: 'find it' }]);
    assert.equal(messagesIn(calls[0].output_messages)[0].tool_calls?.[0].function.arguments, '{"q":"Paris"}');
    assert.equal(toolsIn(calls[0].tools)[0].function.name, 'lookup');
    assert.deepEqual(calls[1].prompt_token_ids, testTokenIds('say more'));
    assert.deepEqual(calls[1].response_token_ids, testTokenIds('Echo: say more'));
    assert.deepEqual(json(calls[1].output_messages), [{ role: 'assistant', content: 'Echo: say more' }]);
    assert.equal(calls[1].output_tokens, testTokenIds('Echo: say more').length);
  });

  test('the agent gets the same bytes as from the upstream directly, JSON and SSE', async () => {
    const { baseURL } = await startedRollout();
    for (const stream of [false, true]) {
      const body = {
        model: 'test-model',
        messages: [{ role: 'user', content: 'same bytes' }],
        stream,
        return_token_ids: true,
        logprobs: true,
      };
      const direct = await (await post(`${upstream.baseURL}/chat/completions`, body)).text();
      const through = await post(`${baseURL}/chat/completions`, body);
      assert.equal(through.headers.get('content-type'), stream ? 'text/event-stream' : 'application/json');
      assert.equal(await through.text(), direct);
    }
  });

  test('an upstream that compresses anyway: the agent gets the compressed bytes, the span the decompressed answer', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const client = new OpenAI({ baseURL, apiKey: 'k' });
    const plain = await client.chat.completions.create({
      model: 'gzip-test-model',
      messages: [{ role: 'user', content: 'packed' }],
    });
    assert.equal(plain.choices[0].message.content, 'Echo: packed');
    const stream = await client.chat.completions.create({
      model: 'gzip-test-model',
      messages: [{ role: 'user', content: 'packed stream' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Echo: packed stream');
    const calls = await callsOf(rolloutId, 2);
    assert.deepEqual(
      calls.map((c) => messagesIn(c.output_messages)[0].content),
      ['Echo: packed', 'Echo: packed stream'],
    );
    assert.deepEqual(calls[1].response_token_ids, testTokenIds('Echo: packed stream'));
  });

  test('curl, as an agent in another language, with the rollout in headers', async () => {
    const { rolloutId, attemptId } = await startedRollout();
    const out = await new Promise<string>((resolve, reject) =>
      execFile(
        'curl',
        [
          '-sS',
          '-X',
          'POST',
          `${agl.url}/v1/gateway/v1/completions`,
          '-H',
          'content-type: application/json',
          '-H',
          `x-rollout-id: ${rolloutId}`,
          '-H',
          `x-attempt-id: ${attemptId}`,
          '-d',
          '{"model":"test-model","prompt":"from curl"}',
        ],
        (error, stdout) => (error ? reject(error) : resolve(stdout)),
      ),
    );
    assert.equal(JSON.parse(out).choices[0].text, ' Echo: from curl');
    const [call] = await callsOf(rolloutId);
    assert.deepEqual(json(call.input_messages), [{ role: 'user', content: 'from curl' }]);
    assert.equal(call.attempt_id, attemptId);
  });

  test('a lone surrogate escape in the request: the call is in llm_calls, the text with U+FFFD', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    // JSON.stringify writes a lone surrogate as the escape \ud800, as a careless agent would send it.
    const answer = await post(`${baseURL}/chat/completions`, {
      model: 'test-\ud800model',
      messages: [{ role: 'user', content: 'odd \udc00 text' }],
    });
    assert.equal(answer.status, 200);
    const [call] = await callsOf(rolloutId);
    assert.equal(call.model, 'test-\ufffdmodel');
    assert.deepEqual(json(call.input_messages), [{ role: 'user', content: 'odd \ufffd text' }]);
    const [span] = await rows(`SELECT name FROM spans WHERE rollout_id = '${rolloutId}'`);
    assert.equal(span.name, 'chat test-\ufffdmodel');
  });

  test("a rollout's llm resource picks endpoint, model and default sampling; a new version takes effect at once", async () => {
    const llm = {
      resource_type: 'llm',
      endpoint: other.baseURL,
      model: 'served-model',
      api_key: 'upstream-key',
      sampling_parameters: { temperature: 0.3 },
    };
    const { rolloutId, resourcesId, baseURL } = await startedRollout({ llm });
    await post(`${baseURL}/chat/completions`, { model: 'whatever', messages: [{ role: 'user', content: 'hi' }] });
    const seen = other.requests.at(-1);
    assert.deepEqual(
      [seen?.body.model, seen?.body.temperature, seen?.headers.authorization],
      ['served-model', 0.3, 'Bearer upstream-key'],
    );

    await agl.store.lightning.updateResources(resourcesId, {
      llm: { ...llm, endpoint: upstream.baseURL, model: 'v2' },
    } as never);
    const before = upstream.requests.length;
    await post(`${baseURL}/chat/completions`, { model: 'whatever', messages: [{ role: 'user', content: 'again' }] });
    assert.equal(upstream.requests.length, before + 1);
    assert.equal(upstream.requests.at(-1)?.body.model, 'v2');
    assert.deepEqual(
      (await callsOf(rolloutId, 2)).map((c) => c.model),
      ['served-model', 'v2'],
    );
  });

  test('GET models passes through', async () => {
    const answer = await fetch(`${agl.url}/v1/gateway/v1/models`);
    assert.equal(answer.status, 200);
    assert.equal(((await answer.json()) as { data: { id: string }[] }).data[0].id, 'test-model');
  });
});

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test('configured: logprobs asked for, the agent key passed on, unattributed calls kept', async () => {
  const second = await startAgl(`${dir}/gateway-2.duckdb`, {
    gateway: {
      upstream: upstream.baseURL,
      timeoutMs: 1_000,
      returnTokenIds: false,
      returnLogprobs: true,
      passAgentKey: true,
    },
  });
  try {
    const client = new OpenAI({ baseURL: `${second.url}/v1/gateway/v1`, apiKey: 'agent-key' });
    await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'with logprobs' }],
    });
    const seen = upstream.requests.at(-1);
    assert.deepEqual(
      [seen?.body.logprobs, seen?.body.return_token_ids, seen?.headers.authorization],
      [true, undefined, 'Bearer agent-key'],
    );
    await second.close(); // stores the buffered gateway span
    const reopened = await startAgl(`${dir}/gateway-2.duckdb`);
    try {
      const { rows: calls } = await reopened.store.query('SELECT rollout_id, response_logprobs FROM llm_calls', {
        guard: false,
      });
      assert.deepEqual(calls, [{ rollout_id: null, response_logprobs: [-0.5, -0.5, -0.5] }]);
    } finally {
      await reopened.close();
    }
  } catch (error) {
    await second.close().catch(() => {});
    throw error;
  }
});

test('with --token and --pass-agent-key, the server token never reaches the upstream', async () => {
  // Agents send agl's token as their API key: passing it on would hand it to the model server.
  const guarded = await startAgl(`${dir}/gateway-token.duckdb`, {
    token: 'agl-secret',
    gateway: { upstream: upstream.baseURL, timeoutMs: 1_000, returnTokenIds: false, passAgentKey: true },
  });
  try {
    const client = new OpenAI({ baseURL: `${guarded.url}/v1/gateway/v1`, apiKey: 'agl-secret' });
    await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'keep my token' }],
    });
    const call = upstream.requests.at(-1);
    assert.deepEqual([call?.body.messages?.[0].content, call?.headers.authorization], ['keep my token', undefined]);
  } finally {
    await guarded.close();
  }
});

describe('faults', () => {
  const errorSpan = async (rolloutId: string) => {
    const [span] = await eventually(
      agl.store,
      `SELECT status_code, status_message, attributes->>'error.type' AS type FROM spans WHERE rollout_id = '${rolloutId}'`,
      1,
    );
    return span;
  };

  test('upstream 4xx/5xx: the agent gets its status and body, the span the error', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const answer = await post(`${baseURL}/chat/completions`, { model: 'error-429', messages: [] });
    assert.equal(answer.status, 429);
    assert.equal(await errorMessage(answer), 'test server answers 429');
    assert.deepEqual(await errorSpan(rolloutId), {
      status_code: 'ERROR',
      status_message: 'test server answers 429',
      type: '429',
    });
  });

  test('upstream unreachable: 502 with a clear message', async () => {
    const { rolloutId, baseURL } = await startedRollout({
      llm: {
        resource_type: 'llm',
        endpoint: `http://127.0.0.1:${await closedPort()}/v1`,
        model: 'm',
        api_key: null,
        sampling_parameters: {},
      },
    });
    const answer = await post(`${baseURL}/chat/completions`, { model: 'm', messages: [] });
    assert.equal(answer.status, 502);
    assert.match(await errorMessage(answer), /upstream could not be reached for chat\/completions: ECONNREFUSED/);
    assert.equal((await errorSpan(rolloutId)).type, 'upstream_error');
  });

  test('an llm resource whose key cannot be sent (a line break): 502 naming it, and the gateway goes on', async () => {
    const { rolloutId, baseURL } = await startedRollout({
      llm: {
        resource_type: 'llm',
        endpoint: upstream.baseURL,
        model: 'm',
        api_key: 'sk-\nbroken',
        sampling_parameters: {},
      },
    });
    const answer = await post(`${baseURL}/chat/completions`, { model: 'm', messages: [] });
    assert.equal(answer.status, 502);
    assert.match(await errorMessage(answer), /invalid authorization header/);
    assert.equal((await errorSpan(rolloutId)).type, 'upstream_error');
    const next = await startedRollout();
    assert.equal((await post(`${next.baseURL}/chat/completions`, { model: 'm', messages: [] })).status, 200);
  });

  test('the Anthropic SDK on /v1/messages: plain and streamed as from the upstream, its key and version sent', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const client = new Anthropic({
      baseURL: baseURL.replace(/\/v1$/, ''),
      apiKey: 'agent-key',
      maxRetries: 0,
      defaultHeaders: { 'anthropic-version': '2023-06-01' }, // the agent's, passed on
    });
    const question = { role: 'user' as const, content: 'Hello Claude' };
    const plain = await client.messages.create({
      model: 'claude-test',
      max_tokens: 16,
      system: 'Be brief.',
      messages: [question],
    });
    const streamed = await client.messages
      .stream({
        model: 'claude-test',
        max_tokens: 16,
        messages: [question, { role: 'assistant', content: plain.content }, { role: 'user', content: 'again' }],
      })
      .finalMessage();
    assert.equal(streamed.content[0].type === 'text' && streamed.content[0].text, 'Echo: again');
    const sent = claude.requests.slice(-2);
    assert.deepEqual(
      sent.map((r) => [r.path, r.headers['x-api-key'], r.headers['anthropic-version']]),
      [
        ['/v1/messages', 'upstream-anthropic-key', '2023-06-01'],
        ['/v1/messages', 'upstream-anthropic-key', '2023-06-01'],
      ],
    );
    const [first, second] = await callsOf(rolloutId, 2);
    assert.equal(first.provider, 'anthropic');
    assert.deepEqual(json(first.input_messages), [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello Claude' },
    ]);
    assert.deepEqual(json(first.output_messages), [{ role: 'assistant', content: 'Echo: Hello Claude' }]);
    assert.equal(first.response_id, plain.id);
    assert.equal(second.response_id, streamed.id);
    assert.deepEqual(json(second.output_messages), [{ role: 'assistant', content: 'Echo: again' }]);
    assert.equal(second.finish_reason, 'stop');
  });

  test('a Messages call whose upstream is down: 502 in the shape of Anthropic errors', async () => {
    const { rolloutId, baseURL } = await startedRollout({
      llm: { resource_type: 'llm', endpoint: 'http://127.0.0.1:1/v1', model: 'x' },
    });
    const answer = await post(`${baseURL}/messages`, { model: 'm', max_tokens: 1, messages: [] });
    assert.equal(answer.status, 502);
    const body = (await answer.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.match(body.error.message, /could not be reached/);
    assert.equal((await errorSpan(rolloutId)).type, 'upstream_error');
  });

  test('upstream too slow: 504, nothing hangs', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const answer = await post(`${baseURL}/chat/completions`, { model: 'slow-3000', messages: [] });
    assert.equal(answer.status, 504);
    assert.equal((await errorSpan(rolloutId)).type, 'upstream_timeout');
  });

  test('a stream cut mid-way: the agent sees the cut, the span keeps what came', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const answer = await post(`${baseURL}/chat/completions`, {
      model: 'cut-stream',
      stream: true,
      messages: [{ role: 'user', content: 'a b c' }],
    });
    assert.equal(answer.status, 200);
    await assert.rejects(answer.text());
    const span = await errorSpan(rolloutId);
    assert.equal(span.type, 'stream_cut');
    const [call] = await callsOf(rolloutId);
    assert.deepEqual(json(call.output_messages), [{ role: 'assistant', content: 'Echo: ' }]);
  });

  test('bad requests: not JSON 400, too large 413, unknown rollout or attempt 404; nothing stored', async () => {
    const { rolloutId, baseURL } = await startedRollout();
    const notJson = await post(`${baseURL}/chat/completions`, '{oops');
    assert.equal(notJson.status, 400);
    assert.match(await errorMessage(notJson), /the body is not JSON/);
    const large = await post(`${baseURL}/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'x'.repeat(100_000) }],
    });
    assert.equal(large.status, 413);
    const unknown = await post(`${gatewayBaseUrl(agl.url, 'ro-nope', 'at-nope')}/chat/completions`, {
      model: 'm',
      messages: [],
    });
    assert.equal(unknown.status, 404);
    assert.match(await errorMessage(unknown), /no rollout "ro-nope"/);
    const wrongAttempt = await post(`${gatewayBaseUrl(agl.url, rolloutId, 'at-nope')}/chat/completions`, {
      model: 'm',
      messages: [],
    });
    assert.equal(wrongAttempt.status, 404);
    assert.match(await errorMessage(wrongAttempt), /has no attempt "at-nope"/);
    assert.equal((await rows(`SELECT * FROM spans WHERE rollout_id = '${rolloutId}'`)).length, 0);
  });
});

describe('runners', () => {
  test("an agent run with gatewayEnv under agl/register: one llm_calls row, the gateway's, in the agent's trace", async () => {
    const { rolloutId, attemptId } = await startedRollout();
    const result = await runApp('cjs-chat.cjs', {
      ...gatewayEnv(agl.url, rolloutId, attemptId),
      AGL_ENDPOINT: agl.url,
    });
    assert.equal(result.code, 3, result.stderr);
    assert.deepEqual(JSON.parse(result.stdout), { plain: 'Echo: hello cjs', text: 'Echo: stream cjs' });
    const calls = await callsOf(rolloutId, 2);
    assert.equal(calls.length, 2);
    assert.ok(
      calls.every((c) => Array.isArray(c.response_token_ids) && c.response_token_ids.length > 0),
      'the gateway asked for token ids',
    );
    const spans = await rows(
      `SELECT span_id, parent_id, trace_id, attributes->>'agl.gateway' AS gateway FROM spans WHERE rollout_id = '${rolloutId}' AND (attributes->>'agl.llm.api') = 'chat'`,
    );
    const gatewaySpans = spans.filter((s) => s.gateway === 'true');
    assert.equal(gatewaySpans.length, 2);
    for (const span of gatewaySpans)
      assert.ok(
        spans.some((s) => s.span_id === span.parent_id && s.trace_id === span.trace_id),
        "under the agent's own span",
      );
    const rewards = await rows(`SELECT name FROM rewards WHERE rollout_id = '${rolloutId}' ORDER BY name`);
    assert.deepEqual(
      rewards.map((r) => r.name),
      ['brevity', 'correct'],
    );
  });
});
