import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { DuckDBInstance } from '@duckdb/node-api';
import { tableFromIPC } from 'apache-arrow';
import { invalidReason, type ChatRecord } from '../../src/adapters/messages.js';
import { CREDITED_CALLS_READY_SQL } from '../../src/sql/derived.js';
import { spanRows } from '../../src/store/span-json.js';
import { newTempDir, removeDir, runCli, startAgl, type InProcessAgl } from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// SFT export: an instrumented agent's calls become OpenAI fine-tuning records.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;

before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'export.duckdb'));
  llm = await startOpenAITestServer();
  const run = await runApp('openai-chat.mjs', {
    AGL_ENDPOINT: agl.url,
    OPENAI_BASE_URL: llm.baseURL,
    AGL_ROLLOUT_ID: 'ro-export',
    AGL_ATTEMPT_ID: 'at-1',
    AGL_RETURN_TOKEN_IDS: '1',
  });
  assert.equal(run.code, 0, run.stderr);
  // A call whose record cannot be valid: a tool result no assistant message asked for.
  const request = {
    model: 'm',
    messages: [
      { role: 'user', content: 'q' },
      { role: 'tool', tool_call_id: 'nope', content: 'x' },
    ],
  };
  const response = {
    id: 'r-bad',
    choices: [{ index: 0, message: { role: 'assistant', content: 'a' }, finish_reason: 'stop' }],
  };
  await agl.store.writeSpans(
    spanRows({
      rollout_id: 'ro-bad',
      attempt_id: 'at-1',
      sequence_id: null,
      trace_id: 'b'.repeat(32),
      span_id: 'b'.repeat(16),
      parent_id: null,
      name: 'chat m',
      kind: 'CLIENT',
      status: { status_code: 'UNSET', description: null },
      attributes: {
        'agl.llm.api': 'chat',
        'agl.llm.request': JSON.stringify(request),
        'agl.llm.response': JSON.stringify(response),
      },
      events: [],
      links: [],
      start_time: 1,
      end_time: 2,
      context: null,
      parent: null,
      resource: { attributes: {}, schema_url: '' },
    }),
    0,
  );
});
after(async () => {
  await llm.close();
  await agl.close();
  await removeDir(dir);
});

const exportMessages = (out: string, ...args: string[]) =>
  runCli(['export', 'messages', '--url', agl.url, '--out', join(dir, out), ...args]);
const readJsonl = async (file: string) =>
  (await readFile(join(dir, file), 'utf8'))
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));

describe('agl export messages', () => {
  test('an agent run to JSONL: one valid record per call, the invalid one reported and skipped', async () => {
    const result = await exportMessages('all.jsonl');
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /wrote 2 record\(s\) to .*all\.jsonl; skipped 1:/);
    assert.match(
      result.stderr,
      /1 x message 1: tool result for nope, which no earlier assistant message called \(e\.g\. rollout ro-bad, span b{16}\)/,
    );
    const [first, second] = await readJsonl('all.jsonl');
    assert.deepEqual(first.messages, [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
    ]);
    assert.equal(first.tools[0].function.name, 'get_weather');
    assert.equal(first.parallel_tool_calls, false);
    assert.deepEqual(second.messages.at(-1), { role: 'assistant', content: 'Echo: thanks' });
    assert.equal(second.messages[2].tool_call_id, 'call_1');
  });

  test('Parquet holds the same records', async () => {
    const result = await exportMessages('all.parquet');
    assert.equal(result.code, 0, result.stderr);
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    const reader = await connection.runAndReadAll(
      `SELECT messages::VARCHAR AS messages, tools::VARCHAR AS tools, parallel_tool_calls FROM read_parquet('${join(dir, 'all.parquet')}')`,
    );
    // A record without tools has NULL in those columns.
    const fromParquet = reader.getRowObjectsJS().map((row) => ({
      messages: JSON.parse(row.messages as string),
      ...(row.tools === null
        ? {}
        : { tools: JSON.parse(row.tools as string), parallel_tool_calls: row.parallel_tool_calls }),
    }));
    connection.closeSync();
    instance.closeSync();
    await exportMessages('again.jsonl');
    assert.deepEqual(fromParquet, await readJsonl('again.jsonl'));
  });

  test('--where and --min-reward pick the calls', async () => {
    await exportMessages('kept.jsonl', '--min-reward', '0.5', '--where', "rollout_id = 'ro-export'");
    assert.equal((await readJsonl('kept.jsonl')).length, 2);
    await exportMessages('none.jsonl', '--min-reward', '0.9');
    assert.equal((await readJsonl('none.jsonl')).length, 0);
  });

  test('triplets: the agent run in call order, its reward on the last call (step credit), also as Parquet', async () => {
    const result = await runCli([
      'export',
      'triplets',
      '--url',
      agl.url,
      '--where',
      "rollout_id = 'ro-export'",
      '--out',
      join(dir, 'triplets.jsonl'),
    ]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /wrote 2 record\(s\)/, "the count the server's COPY reported");
    const triplets = await readJsonl('triplets.jsonl');
    assert.deepEqual(
      triplets.map((t) => [t.response.message.content, t.reward, t.metadata.rollout_id]),
      [
        [null, null, 'ro-export'],
        ['Echo: thanks', 0.75, 'ro-export'],
      ],
    );
    assert.equal(triplets[0].response.message.tool_calls[0].function.name, 'get_weather');
    // Once every span is derived, the default export is a scan of the deriver's rows: the same triplets.
    await agl.store.deriveAll();
    assert.deepEqual((await agl.store.query(CREDITED_CALLS_READY_SQL, { guard: false })).rows, [{ ready: true }]);
    const scanned = await runCli(['export', 'triplets', '--url', agl.url, '--out', join(dir, 'all-triplets.jsonl')]);
    assert.equal(scanned.code, 0, scanned.stderr);
    assert.deepEqual(
      (await readJsonl('all-triplets.jsonl')).filter((t) => t.metadata.rollout_id === 'ro-export'),
      triplets,
    );
    const final = await runCli([
      'export',
      'triplets',
      '--url',
      agl.url,
      '--where',
      "rollout_id = 'ro-export'",
      '--credit',
      'final',
      '--out',
      join(dir, 'triplets.parquet'),
    ]);
    assert.equal(final.code, 0, final.stderr);
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    const reader = await connection.runAndReadAll(
      `SELECT reward, metadata->>'rollout_id' AS rollout FROM read_parquet('${join(dir, 'triplets.parquet')}')`,
    );
    assert.deepEqual(reader.getRowObjectsJS(), [
      { reward: 0.75, rollout: 'ro-export' },
      { reward: 0.75, rollout: 'ro-export' },
    ]);
    connection.closeSync();
    instance.closeSync();
  });

  test('trajectories: token rows of the run, Parquet with typed lists; a call without token ids is reported', async () => {
    const result = await runCli([
      'export',
      'trajectories',
      '--url',
      agl.url,
      '--trajectory-mode',
      'trajectory',
      '--out',
      join(dir, 'rl.parquet'),
    ]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /1 call\(s\) without token ids left out \(rollouts: ro-bad\)/);
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    const reader = await connection.runAndReadAll(
      `SELECT rollout_id, typeof(prompt_ids) AS type, len(response_ids) = len(response_mask) AS aligned, reward, calls FROM read_parquet('${join(dir, 'rl.parquet')}')`,
    );
    const rows = reader.getRowObjectsJS();
    connection.closeSync();
    instance.closeSync();
    assert.ok(rows.length >= 1);
    assert.ok(rows.every((r) => r.rollout_id === 'ro-export' && r.type === 'INTEGER[]' && r.aligned === true));
    assert.equal(rows.at(-1)?.reward, 0.75);
  });

  test('Arrow IPC files hold the same triplets and trajectories, with typed lists', async () => {
    const jsonl = await readJsonl('triplets.jsonl');
    const result = await runCli([
      'export',
      'triplets',
      '--url',
      agl.url,
      '--where',
      "rollout_id = 'ro-export'",
      '--out',
      join(dir, 'triplets.arrow'),
    ]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /wrote 2 record\(s\)/);
    const table = tableFromIPC(await readFile(join(dir, 'triplets.arrow')));
    assert.equal(table.numRows, 2);
    const rows = table.toArray().map((row) => row.toJSON());
    assert.deepEqual(
      rows.map((r) => [JSON.parse(r.response.message).content, r.reward, [...r.prompt.token_ids]]),
      jsonl.map((t) => [t.response.message.content, t.reward, t.prompt.token_ids]),
    );
    assert.equal(
      String(table.schema.fields.find((f) => f.name === 'prompt')?.type),
      'Struct<{messages:Utf8, token_ids:List<Int32>}>',
    );
    const rl = await runCli([
      'export',
      'trajectories',
      '--url',
      agl.url,
      '--where',
      "rollout_id = 'ro-export'",
      '--out',
      join(dir, 'rl.arrow'),
    ]);
    assert.equal(rl.code, 0, rl.stderr);
    const trajectories = tableFromIPC(await readFile(join(dir, 'rl.arrow')));
    assert.ok(trajectories.numRows >= 1);
    const mask = trajectories.getChild('response_mask')?.get(0);
    const ids = trajectories.getChild('response_ids')?.get(0);
    assert.ok(mask && ids);
    assert.equal(mask.length, ids.length);
  });

  test('bad arguments are usage errors', async () => {
    assert.equal((await runCli(['export', 'messages', '--url', agl.url])).code, 2);
    assert.match(
      (await runCli(['export', 'messages', '--url', agl.url, '--out', 'x.txt'])).stderr,
      /--out must end in .jsonl, .ndjson, .parquet/,
    );
    assert.match(
      (await runCli(['export', 'messages', '--url', agl.url, '--out', 'x.jsonl', '--min-reward', 'high'])).stderr,
      /--min-reward must be a number, not "high"/,
    );
    assert.match(
      (await runCli(['export', 'episodes', '--out', 'x.jsonl'])).stderr,
      /agl export knows messages, triplets and trajectories, not "episodes"/,
    );
    assert.match(
      (await runCli(['export', 'trajectories', '--url', agl.url, '--out', 'x.jsonl', '--max-prompt-length', '0']))
        .stderr,
      /--max-prompt-length must be above 0/,
    );
    assert.match(
      (await runCli(['export', 'triplets', '--url', agl.url, '--out', 'x.jsonl', '--credit', 'all'])).stderr,
      /--credit must be one of step, final, discounted/,
    );
    assert.match(
      (await runCli(['export', 'triplets', '--url', agl.url, '--out', 'x.jsonl', '--agent-match', '('])).stderr,
      /--agent-match is not a regular expression/,
    );
  });
});

describe('record validation', () => {
  const valid: ChatRecord = {
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a' },
    ],
  };
  test('names what makes a record invalid', () => {
    assert.equal(invalidReason(valid), null);
    assert.equal(invalidReason({ messages: [] }), 'no messages');
    assert.equal(
      invalidReason({ messages: [{ role: 'user', content: 'q' }] }),
      "the last message is not the assistant's answer",
    );
    assert.equal(
      invalidReason({
        messages: [
          { role: 'robot', content: 'q' },
          { role: 'assistant', content: 'a' },
        ],
      }),
      'message 0 has role "robot"',
    );
    assert.equal(
      invalidReason({
        messages: [
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{oops' } }],
          },
        ],
      }),
      'message 0: the arguments of tool call c are not valid JSON',
    );
    assert.equal(
      invalidReason({
        messages: [
          { role: 'user', content: null },
          { role: 'assistant', content: 'a' },
        ],
      }),
      'message 0 has no text content',
    );
    assert.equal(
      invalidReason({ ...valid, tools: [{}] }),
      'tools must be a list of {type: "function", function: {name, ...}}',
    );
  });
});

test('a tool schema nested 5,000 deep: that record is left out and said, the export goes on', async (t) => {
  const own = await startAgl(join(dir, 'deep.duckdb'));
  t.after(() => own.close());
  // Written as text: JSON.stringify overflows the stack on it, as it did in the export.
  const deep = `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`;
  const request = `{"model":"m","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"t","parameters":${deep}}}]}`;
  const response = JSON.stringify({
    id: 'r-deep',
    choices: [{ index: 0, message: { role: 'assistant', content: 'a' }, finish_reason: 'stop' }],
  });
  await own.store.writeSpans(
    spanRows({
      rollout_id: 'ro-deep',
      attempt_id: 'at-1',
      sequence_id: null,
      trace_id: 'd'.repeat(32),
      span_id: 'd'.repeat(16),
      parent_id: null,
      name: 'chat m',
      kind: 'CLIENT',
      status: { status_code: 'UNSET', description: null },
      attributes: { 'agl.llm.api': 'chat', 'agl.llm.request': request, 'agl.llm.response': response },
      events: [],
      links: [],
      start_time: 1,
      end_time: 2,
      context: null,
      parent: null,
      resource: { attributes: {}, schema_url: '' },
    }),
    0,
  );
  const result = await runCli(['export', 'messages', '--url', own.url, '--out', join(dir, 'deep.jsonl')]);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stderr, /wrote 0 record\(s\)/);
  assert.match(result.stderr, /1 record\(s\) left out: nested too deep to write as JSON/);
});
