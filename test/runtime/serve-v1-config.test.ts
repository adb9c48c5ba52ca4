import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { runCli, spawnServe, tempDir } from '../support/helpers.js';
import { startOpenAITestServer } from '../support/openai-server.js';

// Agent Lightning v1's server.yaml as `agl serve --v1-config`, and --v1-model.

test('a --v1-config that cannot be used is named, with what is wrong in it', async (t) => {
  const dir = await tempDir(t);
  const file = async (name: string, text: string) => {
    await writeFile(join(dir, name), text);
    return join(dir, name);
  };
  const cases: [string[], RegExp][] = [
    [['--v1-config', join(dir, 'none.yaml')], /--v1-config .*none\.yaml: no such file/],
    [['--v1-config', await file('broken.yaml', 'default_proxy: [')], /broken\.yaml is not valid YAML/],
    [
      ['--v1-config', await file('typo.yaml', 'default_proxy:\n  modle_name: x\n')],
      /typo\.yaml: default_proxy: .*modle_name/,
    ],
    [
      ['--v1-config', await file('hot.yaml', 'default_proxy:\n  train:\n    temperature: hot\n')],
      /hot\.yaml: default_proxy\.train: temperature must be a number of 0 or more/,
    ],
    [
      ['--v1-config', await file('hydra.yaml', `key: ${'$'}{oc.env:AGL_KEY}\n`)],
      /hydra\.yaml: key is a Hydra interpolation/,
    ],
    [['--v1-model', ' '], /--v1-model needs a model name/],
  ];
  for (const [args, problem] of cases) {
    const result = await runCli(['serve', '--db', join(dir, 'never.duckdb'), ...args]);
    assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`);
    assert.match(result.stderr, problem);
  }
});

test("v1's server.yaml sets the proxy's model and modes and the key; --v1-model overrides the model", async (t) => {
  const dir = await tempDir(t);
  const model = await startOpenAITestServer();
  t.after(() => model.close());
  const config = join(dir, 'server.yaml');
  await writeFile(
    config,
    [
      'host: 127.0.0.1',
      'port: 8080',
      'key: "yaml-key"',
      'default_proxy:',
      '  model_name: "from-the-file"',
      '  include_log_probs: false',
      '  train:',
      '    temperature: 0.9',
      '    max_tokens: 64',
      '',
    ].join('\n'),
  );
  const serve = await spawnServe(['--db', join(dir, 'v1.duckdb'), '--v1-config', config, '--v1-model', 'flag-model']);
  t.after(() => serve.child.kill('SIGKILL'));
  const headers = { authorization: 'Bearer yaml-key', 'content-type': 'application/json' };
  const unauthorized = await fetch(`${serve.url}/api/models`, { method: 'DELETE' });
  assert.equal(unauthorized.status, 401, "the file's key guards the server");
  const registered = await fetch(`${serve.url}/api/models`, {
    method: 'POST',
    headers,
    body: JSON.stringify([{ model: 'flag-model', endpoint: model.baseURL }]),
  });
  assert.equal(registered.status, 201);
  const rollout = await fetch(`${serve.url}/v1/agl/queues/rollouts/enqueue`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ rollouts: [{ input: {} }] }),
  });
  const [{ rollout_id: rolloutId }] = (await rollout.json()) as { rollout_id: string }[];
  const proxied = await fetch(
    `${serve.url}/proxy/rollout/${rolloutId}/attempt/0/mode/train/openai/v1/chat/completions`,
    {
      method: 'POST',
      headers,
      body: JSON.stringify({ model: 'x', temperature: 0, messages: [{ role: 'user', content: 'hi' }] }),
    },
  );
  assert.equal(proxied.status, 200, await proxied.clone().text());
  const sent = model.requests.at(-1)?.body;
  assert.equal(sent?.model, 'flag-model');
  assert.equal(sent?.temperature, 0.9);
  assert.equal(sent?.max_tokens, 64);
  assert.equal(sent?.return_token_ids, true);
  assert.equal(sent?.logprobs, undefined, 'include_log_probs: false');
});
