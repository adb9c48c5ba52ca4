import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import {
  newTempDir,
  removeDir,
  startAgl,
  type InProcessAgl,
  eventually,
  json,
  objectIn,
  until,
} from '../support/helpers.js';
import {
  startOpenAITestServer,
  testTokenIds,
  type ChatRequest,
  type ChatScript,
  type OpenAITestServer,
} from '../support/openai-server.js';

// Agent Lightning v1's model registry and LLM proxy on agl's gateway: what v1's agents and
// trainer send (/api/models, /proxy/...), what the model server gets, what agl records.

const TOKEN = 'v1-key';
const SERVED = 'Qwen/Qwen3-0.6B';

/** Calls the test model servers hold open until the test lets them go: by the text of their last message. */
class Holds {
  private readonly held = new Map<string, { arrived: () => void; release: () => void; released: Promise<void> }>();
  private readonly arrivals = new Map<string, Promise<void>>();

  /** Holds the next call whose last message is `text`; resolves once it reached the model server. */
  hold(text: string): Promise<void> {
    let arrived!: () => void;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const arrival = new Promise<void>((resolve) => (arrived = resolve));
    this.held.set(text, { arrived, release, released });
    this.arrivals.set(text, arrival);
    return arrival;
  }

  release(text: string): void {
    this.held.get(text)?.release();
  }

  script = (body: ChatRequest): ChatScript | undefined => {
    const last = body.messages.at(-1)?.content;
    const held = typeof last === 'string' ? this.held.get(last) : undefined;
    if (!held) return undefined;
    held.arrived();
    return { hold: held.released };
  };
}

let dir: string;
let agl: InProcessAgl;
let first: OpenAITestServer;
let second: OpenAITestServer;
const holds = new Holds();

before(async () => {
  dir = await newTempDir();
  first = await startOpenAITestServer({ fixedIds: true, chat: holds.script });
  second = await startOpenAITestServer({ fixedIds: true, chat: holds.script });
  agl = await startAgl(`${dir}/v1-proxy.duckdb`, {
    token: TOKEN,
    gateway: { timeoutMs: 5_000 },
    v1Proxy: {
      modelName: SERVED,
      includeLogprobs: true,
      train: { temperature: 1 },
      val: { temperature: 0.7, top_p: 0.9 },
    },
  });
});
after(async () => {
  await agl.close();
  await first.close();
  await second.close();
  await removeDir(dir);
});

const auth = { authorization: `Bearer ${TOKEN}` };

const call = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  fetch(`${agl.url}${path}`, {
    method,
    headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

async function register(servers: unknown[]): Promise<void> {
  await call('DELETE', '/api/models');
  const answer = await call('POST', '/api/models', servers);
  assert.equal(answer.status, 201, await answer.clone().text());
}

/** A rollout in agl's store; the v1 proxy takes any rollout id the store has. */
async function newRollout(): Promise<string> {
  return (await agl.store.lightning.startRollout({ input: { q: 1 } })).rollout_id;
}

const proxyBase = (rolloutId: string, mode = 'train', attemptId = '0') =>
  `${agl.url}/proxy/rollout/${rolloutId}/attempt/${attemptId}/mode/${mode}/openai/v1`;

const agent = (rolloutId: string, mode = 'train') =>
  new OpenAI({ baseURL: proxyBase(rolloutId, mode), apiKey: TOKEN, maxRetries: 0 });

const callsOf = (rolloutId: string, count = 1) =>
  eventually(agl.store, `SELECT * FROM llm_calls WHERE rollout_id = '${rolloutId}' ORDER BY sequence_id`, count);

const proxyState = async () => (await (await call('GET', '/proxy/state')).json()) as Record<string, unknown>;

describe('the model registry', () => {
  test('POST /api/models answers 201 with the servers (version 0 when not given), DELETE clears them', async () => {
    const created = await call('POST', '/api/models', [
      { model: SERVED, endpoint: first.baseURL, version: 3 },
      { model: SERVED, endpoint: second.baseURL, extra: 'dropped' },
    ]);
    assert.equal(created.status, 201);
    assert.deepEqual(await created.json(), [
      { model: SERVED, endpoint: first.baseURL, version: 3 },
      { model: SERVED, endpoint: second.baseURL, version: 0 },
    ]);
    // Kept as a version of agl's resources, so a restart (or another server) has them.
    const stored = await call('GET', '/v1/agl/resources/agl-v1-models');
    const resources = ((await stored.json()) as { resources: Record<string, { endpoint: string }> }).resources;
    assert.deepEqual(
      Object.values(resources)
        .map((r) => r.endpoint)
        .sort(),
      [first.baseURL, second.baseURL].sort(),
    );

    const deleted = await call('DELETE', '/api/models');
    assert.equal(deleted.status, 200);
    assert.deepEqual(await deleted.json(), { status: 'ok' });
    const rolloutId = await newRollout();
    const refused = await call('POST', `/proxy/rollout/${rolloutId}/attempt/0/mode/train/openai/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(refused.status, 503);
    assert.match(
      ((await refused.json()) as { detail: string }).detail,
      /No servers available for model 'Qwen\/Qwen3-0.6B'/,
    );
  });

  test('a bad registration is a 400 naming the field, and changes nothing', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL }]);
    for (const [body, problem] of [
      [{ model: SERVED, endpoint: first.baseURL }, /the body must be a list/],
      [[{ model: SERVED, endpoint: 'not a url' }], /\[0\]\.endpoint must be an http\(s\) URL/],
      [[{ model: '', endpoint: first.baseURL }], /\[0\]\.model is required/],
      [[{ model: SERVED, endpoint: first.baseURL, version: -1 }], /\[0\]\.version must be an integer of at least 0/],
    ] as const) {
      const answer = await call('POST', '/api/models', body);
      assert.equal(answer.status, 400);
      assert.match(((await answer.json()) as { detail: string }).detail, problem);
    }
    const stored = (await (await call('GET', '/v1/agl/resources/agl-v1-models')).json()) as { resources: object };
    assert.equal(Object.keys(stored.resources).length, 1);
  });
});

describe('calls through the proxy', () => {
  test('a train call goes to the served model with the train parameters, token ids and logprobs; llm_calls has it', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL, version: 7 }]);
    const rolloutId = await newRollout();
    const seen = first.requests.length;
    const answer = await agent(rolloutId).chat.completions.create({
      model: 'whatever-the-agent-says',
      temperature: 0.1,
      messages: [{ role: 'user', content: 'what is 2 + 2' }],
    });
    assert.equal(answer.choices[0].message.content, 'Echo: what is 2 + 2');
    const sent = first.requests[seen].body;
    assert.equal(sent.model, SERVED);
    assert.equal(sent.temperature, 1);
    assert.equal(sent.return_token_ids, true);
    assert.equal(sent.logprobs, true);

    const [row] = await callsOf(rolloutId);
    assert.equal(row.attempt_id, '0');
    assert.deepEqual(json(row.prompt_token_ids), testTokenIds('what is 2 + 2'));
    assert.deepEqual(json(row.response_token_ids), testTokenIds('Echo: what is 2 + 2'));
    assert.equal((json(row.response_logprobs) as number[]).length, testTokenIds('Echo: what is 2 + 2').length);
    const [span] = await eventually(agl.store, `SELECT attributes FROM spans WHERE span_id = '${row.span_id}'`, 1);
    const attributes = objectIn(span.attributes);
    assert.equal(attributes['agl.v1.mode'], 'train');
    assert.equal(attributes['agl.v1.server.endpoint'], first.baseURL);
    assert.equal(attributes['agl.v1.server.version'], 7);
    assert.equal(attributes['agl.v1.server.model'], SERVED);
  });

  test('a val call has the val parameters and no logprobs; a stream and a completions call have their token ids', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL }]);
    const rolloutId = await newRollout();
    const client = agent(rolloutId, 'val');
    const seen = first.requests.length;
    const stream = await client.chat.completions.create({
      model: SERVED,
      messages: [{ role: 'user', content: 'stream it' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Echo: stream it');
    const completion = await client.completions.create({ model: SERVED, prompt: 'complete me' });
    assert.equal(completion.choices[0].text, ' Echo: complete me');
    const [streamed, completed] = first.requests.slice(seen).map((r) => r.body);
    assert.equal(streamed.temperature, 0.7);
    assert.equal(streamed.top_p, 0.9);
    assert.equal(streamed.logprobs, undefined);
    assert.equal(completed.return_token_ids, true);

    const rows = await callsOf(rolloutId, 2);
    assert.equal(rows.length, 2);
    assert.deepEqual(json(rows[0].response_token_ids), testTokenIds('Echo: stream it'));
    assert.deepEqual(json(rows[1].response_token_ids), testTokenIds(' Echo: complete me'));
    assert.deepEqual(json(rows[1].prompt_token_ids), testTokenIds('complete me'));
  });

  test("each rollout's calls go to one registered server, the one v1's hash of its id picks", async () => {
    await register([
      { model: SERVED, endpoint: second.baseURL },
      { model: SERVED, endpoint: first.baseURL },
      { model: 'another-model', endpoint: 'http://127.0.0.1:9/v1' },
    ]);
    const sorted = [first.baseURL, second.baseURL].sort();
    for (let i = 0; i < 6; i++) {
      const rolloutId = await newRollout();
      const digest = createHash('sha256').update(rolloutId).digest();
      const expected = sorted[Number(digest.readBigUInt64BE(0) % 2n)];
      const [row] = await (async () => {
        await agent(rolloutId).chat.completions.create({ model: SERVED, messages: [{ role: 'user', content: 'x' }] });
        return eventually(agl.store, `SELECT attributes FROM spans WHERE rollout_id = '${rolloutId}'`, 1);
      })();
      assert.equal(objectIn(row.attributes)['agl.v1.server.endpoint'], expected);
    }
  });

  test('refusals: an unknown rollout or mode is a 404, no token a 401, a dead server a 502 that is recorded', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL }]);
    const body = { messages: [{ role: 'user', content: 'hi' }] };
    const unknown = await call('POST', '/proxy/rollout/ro-none/attempt/0/mode/train/openai/v1/chat/completions', body);
    assert.equal(unknown.status, 404);
    const rolloutId = await newRollout();
    const mode = await call('POST', `/proxy/rollout/${rolloutId}/attempt/0/mode/test/openai/v1/chat/completions`, body);
    assert.equal(mode.status, 404);
    assert.match(((await mode.json()) as { detail: string }).detail, /Unsupported proxy mode: test/);
    const anonymous = await fetch(`${proxyBase(rolloutId)}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.equal(anonymous.status, 401);

    await register([{ model: SERVED, endpoint: 'http://127.0.0.1:9/v1' }]);
    const dead = await call(
      'POST',
      `/proxy/rollout/${rolloutId}/attempt/0/mode/train/openai/v1/chat/completions`,
      body,
    );
    assert.equal(dead.status, 502);
    const [row] = await callsOf(rolloutId);
    assert.equal(row.rollout_id, rolloutId);
    assert.equal((await proxyState()).inflight, 0);
  });
});

describe('pause and resume', () => {
  test('a pause lets the calls in flight finish (a stream too) and turns new ones away with 429 and Retry-After', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL }]);
    const rolloutId = await newRollout();
    const client = agent(rolloutId);
    const arrived = Promise.all([holds.hold('held plain'), holds.hold('held stream')]);
    const plain = client.chat.completions.create({
      model: SERVED,
      messages: [{ role: 'user', content: 'held plain' }],
    });
    const stream = client.chat.completions.create({
      model: SERVED,
      messages: [{ role: 'user', content: 'held stream' }],
      stream: true,
    });
    await arrived;
    assert.deepEqual(await proxyState(), { paused: false, retry_after_seconds: 5, reason: null, inflight: 2 });

    const paused = await call('POST', '/proxy/pause', { retry_after_seconds: 9, reason: 'weight update' });
    assert.equal(paused.status, 200);
    assert.deepEqual(await paused.json(), {
      paused: true,
      retry_after_seconds: 9,
      reason: 'weight update',
      inflight: 2,
    });
    const refused = await call('POST', `/proxy/rollout/${rolloutId}/attempt/0/mode/train/openai/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'too late' }],
    });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '9');
    assert.equal(refused.headers.get('x-agl-paused'), 'true');
    assert.deepEqual(await refused.json(), { error: 'gateway paused', reason: 'weight update' });

    holds.release('held plain');
    assert.equal((await plain).choices[0].message.content, 'Echo: held plain');
    assert.equal((await proxyState()).inflight, 1);
    holds.release('held stream');
    let text = '';
    for await (const chunk of await stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'Echo: held stream');
    assert.equal((await proxyState()).inflight, 0);

    const resumed = await call('POST', '/proxy/resume');
    assert.deepEqual(await resumed.json(), { paused: false, retry_after_seconds: 9, reason: null, inflight: 0 });
    const again = await client.chat.completions.create({
      model: SERVED,
      messages: [{ role: 'user', content: 'after' }],
    });
    assert.equal(again.choices[0].message.content, 'Echo: after');
    assert.equal((await callsOf(rolloutId, 3)).length, 3);
  });

  test('an agent that leaves mid-call is no longer in flight', async () => {
    await register([{ model: SERVED, endpoint: first.baseURL }]);
    const rolloutId = await newRollout();
    const arrived = holds.hold('left');
    const abort = new AbortController();
    const leaving = agent(rolloutId)
      .chat.completions.create(
        { model: SERVED, messages: [{ role: 'user', content: 'left' }] },
        { signal: abort.signal },
      )
      .catch((error: unknown) => error);
    await arrived;
    assert.equal((await proxyState()).inflight, 1);
    abort.abort();
    assert.ok((await leaving) instanceof Error);
    await until(async () => assert.equal((await proxyState()).inflight, 0), 5_000);
    holds.release('left');
  });

  test('a bad pause body is a 400; an empty one pauses with the defaults', async () => {
    const bad = await call('POST', '/proxy/pause', { retry_after_seconds: 'soon' });
    assert.equal(bad.status, 400);
    assert.match(((await bad.json()) as { detail: string }).detail, /retry_after_seconds must be an integer/);
    assert.equal((await proxyState()).paused, false);
    const paused = await fetch(`${agl.url}/proxy/pause`, { method: 'POST', headers: auth });
    assert.deepEqual(await paused.json(), { paused: true, retry_after_seconds: 5, reason: null, inflight: 0 });
    await call('POST', '/proxy/resume');
  });
});
