import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { tableFromIPC } from 'apache-arrow';
import { GRPO, GrpoError } from '../../src/algorithms/grpo/index.js';
import type { GrpoOptionsInput } from '../../src/algorithms/grpo/options.js';
import { rollout } from '../../src/runner/agent.js';
import { EXAMPLE_JUDGE_MODEL, EXAMPLE_MODEL, startExampleModel } from '../../src/runtime/example-model.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { fileRows, newTempDir, removeDir } from '../support/helpers.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// GRPO with an LLM judge instead of a reward function: the agent emits no reward; the policy (the
// test server, for its token ids) answers one sample right and one wrong; the offline EXAMPLE
// judge scores the right one higher. The trainer is this test, pulling the batch over HTTP.

let dir: string;
let policy: OpenAITestServer;
let judgeServer: { baseURL: string; close(): Promise<void> };
let rubric: string;

before(async () => {
  dir = await newTempDir();
  let answers = 0;
  // Rollouts run one at a time (one runner): the first sample of a group is right, the second wrong.
  policy = await startOpenAITestServer({ chat: () => ({ content: answers++ % 2 === 0 ? '5' : 'It makes 6.' }) });
  judgeServer = await startExampleModel();
  rubric = join(dir, 'rubric.md');
  await writeFile(rubric, 'The answer is the right number, and only the number.\n');
});
after(async () => {
  await policy.close();
  await judgeServer.close();
  await removeDir(dir);
});

const agent = rollout<{ question: string }>(async (task, ctx) => {
  if (!ctx.llm) throw new Error('the rollout has no llm resource');
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey, maxRetries: 0 });
  await client.chat.completions.create({ model: ctx.llm.model, messages: [{ role: 'user', content: task.question }] });
});

function start(name: string, options: Partial<GrpoOptionsInput>) {
  const db = join(dir, `${name}.duckdb`);
  let announced: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => (announced = resolve));
  const algorithm = new GRPO({
    llm: { endpoint: policy.baseURL, model: 'policy' },
    batchSize: 1,
    groupSize: 2,
    steps: 1,
    maxTopUps: 0,
    judge: rubric,
    judgeEndpoint: judgeServer.baseURL,
    ...options,
    log: (line) => {
      const match = /pulls batches from (\S+)\/v1\/agl/.exec(line);
      if (match) announced(match[1]);
    },
  });
  const run = new Trainer({ algorithm, db }).fit(agent, { train: [{ question: 'What is 2 + 3?' }] });
  return { db, run, url };
}

test('a judged group: the batch carries the judge’s relative scores, written as judge rewards', async () => {
  const { db, run, url } = start('judged', { judgeModel: EXAMPLE_JUDGE_MODEL });
  const server = await url;
  const response = await fetch(`${server}/v1/agl/training/batches/next?wait=60`);
  assert.equal(response.status, 200, await response.clone().text());
  const batchId = String(response.headers.get('agl-batch-id'));
  const rows = tableFromIPC(new Uint8Array(await response.arrayBuffer()))
    .toArray()
    .map((row) => row.toJSON() as Record<string, number>);
  // The batch's reward column is float32.
  assert.deepEqual(rows.map((r) => r.reward).sort(), [Math.fround(0.2), 1]);
  const [right, wrong] = [...rows].sort((a, b) => b.reward - a.reward);
  assert.ok(right.advantage > 0 && wrong.advantage < 0, JSON.stringify(rows));
  const done = await fetch(`${server}/v1/agl/training/batches/${batchId}/done`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  assert.equal(done.status, 200);
  const result = await run;
  assert.equal(result.steps[0].status, 'trained');

  const rewards = await fileRows(db, 'SELECT value, source, feedback FROM rewards ORDER BY value');
  assert.deepEqual(rewards, [
    { value: 0.2, source: 'judge', feedback: '2 + 3 is 5, not 6' },
    { value: 1, source: 'judge', feedback: '2 + 3 = 5, the number alone' },
  ]);
  // The judge's call is a span of the run's own rollout, with its tokens, and no LLM call row.
  const [call] = await fileRows(
    db,
    `SELECT rollout_id, status_code, attributes->>'agl.judge.model' AS model,
       CAST(attributes->>'agl.judge.input_tokens' AS INTEGER) > 0 AS counted FROM spans WHERE name = 'agl.judge.call'`,
  );
  assert.deepEqual(call, { rollout_id: result.runId, status_code: 'OK', model: EXAMPLE_JUDGE_MODEL, counted: true });
  const models = await fileRows(db, 'SELECT DISTINCT model FROM llm_calls');
  assert.deepEqual(models, [{ model: 'policy' }]);
});

test('a judge that answers nonsense is retried, then its rollouts stay unscored (no_reward), never 0', async () => {
  // The arithmetic model answers a judge prompt in a sentence, not the JSON asked for.
  const { db, run } = start('nonsense', { judgeModel: EXAMPLE_MODEL, judgeRetries: 1 });
  const error = await run.then(
    () => assert.fail('the run should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof GrpoError, String(error));
  assert.match(error.message, /left out: 2 no_reward/);
  assert.deepEqual(await fileRows(db, 'SELECT count(*)::INTEGER AS n FROM rewards'), [{ n: 0 }]);
  const [call] = await fileRows(
    db,
    `SELECT status_code, CAST(attributes->>'agl.judge.tries' AS INTEGER) AS tries FROM spans WHERE name = 'agl.judge.call'`,
  );
  assert.deepEqual(call, { status_code: 'ERROR', tries: 2 });
});
