import assert from 'node:assert/strict';
import { copyFile, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { DuckDBInstance } from '@duckdb/node-api';
import { startServer } from '../../src/collector/server.js';
import { DASHBOARD_DIR } from '../../src/collector/static-files.js';
import { EXAMPLE_MODEL, startExampleModel } from '../../src/runtime/example-model.js';
import { DuckDBStore } from '../../src/store/store.js';
import {
  type InProcessAgl,
  messagesIn,
  newTempDir,
  queryRows,
  removeDir,
  runCli,
  spawnServe,
  startAgl,
  ROOT,
} from '../support/helpers.js';
import { notInstalled } from '../support/system-packages.js';

// The dashboard in a real browser (Debian's chromium, driven by playwright-core) over a store
// that a real run filled: `agl demo`, the Trainer with APO. Each page is saved as a screenshot
// under test-output/dashboard (AGL_TEST_OUTPUT to change it).

const EVAL_TASKS = [
  { question: 'What is 12 + 30?', answer: 42 },
  { question: 'What is 7 * 6?', answer: 42 },
  { question: 'What is 9 * 9?', answer: 81 },
];
const OUT = process.env.AGL_TEST_OUTPUT ?? join(ROOT, 'test-output', 'dashboard');
const CHROMIUM = process.env.AGL_CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'dashboard-e2e-token';

let dir: string;
let db: string;
let agl: InProcessAgl;
let browser: Browser;

before(async () => {
  await stat(join(DASHBOARD_DIR, 'index.html')).catch(() => {
    throw new Error(`the dashboard is not built in ${DASHBOARD_DIR}: run npm run build`);
  });
  await stat(CHROMIUM).catch(() => {
    throw notInstalled(`Chromium (${CHROMIUM}; AGL_CHROMIUM names another)`, 'chromium');
  });
  await mkdir(OUT, { recursive: true });
  dir = await newTempDir();
  db = join(dir, 'demo.duckdb');
  const env = { ...process.env };
  delete env.OPENAI_API_KEY; // the offline example models, whatever the machine has
  const demo = await runCli(['demo', '--db', db], { env });
  assert.equal(demo.code, 0, demo.stderr);
  // An evaluation of the demo's first prompt against a better one, for the Evaluations page.
  const model = await startExampleModel();
  await writeFile(join(dir, 'tasks.jsonl'), EVAL_TASKS.map((t) => JSON.stringify(t)).join('\n'));
  const evaluation = await runCli([
    'eval',
    '--agent',
    join(ROOT, 'examples', 'demo', 'agent.mjs'),
    '--tasks',
    join(dir, 'tasks.jsonl'),
    '--db',
    db,
    '--llm-model',
    EXAMPLE_MODEL,
    '--llm-endpoint',
    model.baseURL,
    '--name',
    'plain',
    '--prompt',
    '{question}',
    '--name',
    'strict',
    '--prompt',
    'Work carefully and double-check your arithmetic. Answer with the number only. {question}',
  ]);
  await model.close();
  assert.equal(evaluation.code, 0, evaluation.stderr);
  // A copy for the server with a token (one process owns a file).
  await copyFile(db, join(dir, 'token.duckdb'));
  agl = await startAgl(db);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  await agl?.close();
  if (dir) await removeDir(dir);
});

/**
 * A fresh tab at a laptop's size; every console error or page error fails the test (a CSP
 * refusal is one), but those matching `expected`.
 */
async function openPage(
  t: { after(fn: () => Promise<void>): void },
  expected?: RegExp,
): Promise<{ page: Page; context: BrowserContext }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error' && !expected?.test(message.text())) problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(error.message));
  t.after(async () => {
    await context.close();
    assert.deepEqual(problems, [], 'the page logged errors');
  });
  return { page, context };
}

async function shot(page: Page, name: string, fullPage = false): Promise<void> {
  // From the top: a whole-page picture taken while scrolled shows the sticky header mid-page.
  if (fullPage) await page.evaluate('window.scrollTo(0, 0)');
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage });
}

const count = async (sql: string) => Number((await queryRows(agl.store, sql))[0].n);

test('the rollouts page lists the run, filters it on the server, sorts it, and is usable by keyboard', async (t) => {
  const { page } = await openPage(t);
  await page.goto(agl.url);
  const total = await count('SELECT count(*) AS n FROM rollouts');
  await page.getByText(`1–50 of ${total}`).waitFor();
  assert.equal(await page.locator('table.rollouts tbody tr').count(), 50);
  await shot(page, 'rollouts');

  await page.locator('select[name=mode]').selectOption('val');
  const val = await count("SELECT count(*) AS n FROM rollouts WHERE mode = 'val'");
  await page.getByText(`of ${val}`).waitFor();
  assert.match(page.url(), /mode=val/);

  await page.locator('input[name=q]').fill('12 + 30');
  const matching = await count(
    "SELECT count(*) AS n FROM rollouts WHERE mode = 'val' AND contains(CAST(input AS VARCHAR), '12 + 30')",
  );
  assert.ok(matching > 0 && matching < val);
  await page.getByText(`1–${matching} of ${matching}`).waitFor();
  for (const input of await page.locator('table.rollouts td.input-cell').allTextContents())
    assert.match(input, /12 \+ 30/);

  await page.locator('select[name=status]').selectOption('failed');
  await page.getByText('No rollouts match.').waitFor();
  await page.locator('select[name=status]').selectOption('');

  await page.getByRole('button', { name: /^Started/ }).click();
  await page.locator('th[aria-sort="ascending"]').getByText('Started').waitFor();
  assert.match(page.url(), /order=asc/);

  // Keyboard: from the top, Tab reaches the skip link, then the page links, each with a visible focus ring.
  await page.goto(agl.url);
  await page.locator('table.rollouts tbody tr').first().waitFor();
  await page.keyboard.press('Tab');
  assert.equal(await page.locator(':focus').textContent(), 'Skip to content');
  await page.keyboard.press('Tab');
  // (The test's TypeScript has no DOM: the page runs this text.)
  const ring = await page.evaluate(`(() => {
    const style = getComputedStyle(document.activeElement);
    return { text: document.activeElement.textContent, outline: style.outlineStyle, width: style.outlineWidth };
  })()`);
  assert.deepEqual(ring, { text: 'Rollouts', outline: 'solid', width: '3px' });

  await page.getByRole('button', { name: 'Switch to dark mode' }).click();
  assert.equal(await page.locator('html').getAttribute('data-theme'), 'dark');
  await shot(page, 'rollouts-dark');
});

test('a rollout opens with its attempt, its LLM call as chat, its reward on the timeline and its spans as JSON', async (t) => {
  const { page } = await openPage(t);
  await page.goto(`${agl.url}/?mode=val&q=${encodeURIComponent('12 + 30')}`);
  const link = page.locator('table.rollouts tbody tr a').first();
  const rolloutId = (await link.textContent()) ?? '';
  await link.click();
  await page.waitForURL(`**/rollouts/${rolloutId}`);
  await page.locator('.call').first().waitFor();

  const [call] = await queryRows(
    agl.store,
    `SELECT input_messages, output_messages, input_tokens, output_tokens FROM llm_calls WHERE rollout_id = '${rolloutId}'`,
  );
  const [{ reward }] = await queryRows(
    agl.store,
    `SELECT value AS reward FROM rewards WHERE rollout_id = '${rolloutId}' AND is_primary`,
  );
  const chat = page.locator('.call').first();
  const [asked] = messagesIn(call.input_messages);
  const [answered] = messagesIn(call.output_messages);
  assert.equal(await chat.locator('.message.user .text').textContent(), asked.content);
  assert.equal(await chat.locator('.answer .message.assistant .text').textContent(), answered.content);
  assert.match(
    (await chat.locator('.meta').textContent()) ?? '',
    new RegExp(`${call.input_tokens} in · ${call.output_tokens} out tokens`),
  );
  assert.match((await chat.locator('.credited').textContent()) ?? '', new RegExp(`reward ${reward}`));

  // The reward sits on the row of the LLM call it is credited to, and on its own span's row.
  const callRow = page.locator('button.wf-row.llm');
  assert.equal(await callRow.count(), 1);
  assert.equal((await callRow.locator('.reward-mark').textContent())?.trim(), `◆ ${reward}`);
  await page.locator('button.wf-row.reward').click();
  await page.getByText('credited to LLM call 1').waitFor();
  await page.getByRole('button', { name: 'Show raw span JSON' }).click();
  assert.match((await page.locator('.span-detail pre.json').textContent()) ?? '', /"agentlightning\.reward\.0\.value"/);
  await shot(page, 'rollout', true);
});

/** A POST to the store's REST API. */
async function restPost(url: string, path: string, body: unknown) {
  const response = await fetch(`${url}/v1/agl${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (!response.ok) assert.fail(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as { rollout_id: string; attempt: { attempt_id: string } };
}

/**
 * A rollout of a tool-using agent, written over the REST API as Agent Lightning spans: a system
 * prompt, a tool call and its answer, token ids, and two rewards (one after each call).
 */
async function recordToolRollout(url: string): Promise<string> {
  const post = (path: string, body: unknown) => restPost(url, path, body);
  const rollout = await post('/rollouts', { input: { question: 'What is 17 * 23?' }, mode: 'test' });
  const { rollout_id, attempt } = rollout;
  const trace = 'a1'.repeat(16);
  const t0 = Date.now() / 1000;
  const id = (n: number) => n.toString(16).padStart(16, '0');
  const span = (n: number, name: string, start: number, end: number, attributes: object, parent: number | null = 1) =>
    post('/spans', {
      rollout_id,
      attempt_id: attempt.attempt_id,
      trace_id: trace,
      span_id: id(n),
      parent_id: parent === null ? null : id(parent),
      name,
      start_time: t0 + start,
      end_time: t0 + end,
      attributes,
    });
  const system = { role: 'system', content: 'You are a calculator. Use the tools.' };
  const user = { role: 'user', content: 'What is 17 * 23?' };
  const toolCall = { id: 'call_1', type: 'function', function: { name: 'multiply', arguments: '{"a":17,"b":23}' } };
  const tools = [{ type: 'function', function: { name: 'multiply', parameters: { type: 'object' } } }];
  const chat = (messages: object[], message: object, finish: string, tokens: number[]) => ({
    'agl.llm.api': 'chat',
    'gen_ai.request.model': 'gpt-4o',
    'agl.llm.request': JSON.stringify({ model: 'gpt-4o', messages, tools }),
    'agl.llm.response': JSON.stringify({
      id: `chatcmpl-${tokens[0]}`,
      model: 'gpt-4o',
      prompt_token_ids: [101, 102, 103, 104],
      choices: [{ index: 0, message, finish_reason: finish, token_ids: tokens }],
      usage: { prompt_tokens: 4, completion_tokens: tokens.length },
    }),
  });
  const reward = (value: number, text: object = {}) => ({
    'agentlightning.reward.0.name': 'primary',
    'agentlightning.reward.0.value': value,
    ...text,
  });
  await span(1, 'agent.run', 0, 3, { 'agent.name': 'calculator' }, null);
  await span(
    2,
    'chat gpt-4o',
    0.1,
    0.9,
    chat([system, user], { role: 'assistant', content: null, tool_calls: [toolCall] }, 'tool_calls', [7, 8, 9]),
  );
  await span(3, 'agentlightning.annotation', 0.95, 0.95, reward(0.25, { 'agl.reward.feedback': 'picked the tool' }));
  await span(4, 'tool.multiply', 1.0, 1.1, { 'tool.name': 'multiply' });
  const answer = { role: 'tool', tool_call_id: 'call_1', content: '391' };
  await span(
    5,
    'chat gpt-4o',
    1.2,
    1.8,
    chat(
      [system, user, { role: 'assistant', content: null, tool_calls: [toolCall] }, answer],
      { role: 'assistant', content: 'The answer is 391.' },
      'stop',
      [11, 12],
    ),
  );
  await span(
    6,
    'agentlightning.annotation',
    2.0,
    2.0,
    reward(1, { 'agl.reward.source': 'judge', 'agl.reward.feedback': '17 * 23 = 391, right' }),
  );
  await post(`/rollouts/${rollout_id}/attempts/latest`, { status: 'succeeded' });
  return rollout_id;
}

test('a tool-using rollout shows every role, the tool call with its JSON arguments, token ids on demand and each reward on its call', async (t) => {
  const { page } = await openPage(t);
  const rolloutId = await recordToolRollout(agl.url);
  await page.goto(`${agl.url}/rollouts/${rolloutId}`);
  const calls = page.locator('.call');
  await calls.nth(1).waitFor();
  const first = calls.nth(0);
  assert.equal(await first.locator('.message.system .text').textContent(), 'You are a calculator. Use the tools.');
  assert.equal(await first.locator('.answer .tool-call code').textContent(), 'multiply');
  assert.equal(await first.locator('.answer .tool-call pre').textContent(), '{\n  "a": 17,\n  "b": 23\n}');
  const second = calls.nth(1);
  assert.match((await second.locator('.message.tool .role').textContent()) ?? '', /tool · answers call_1/);
  assert.equal(await second.locator('.message.tool .text').textContent(), '391');
  assert.equal(await second.locator('.answer .text').textContent(), 'The answer is 391.');

  await first.getByRole('button', { name: /Show token ids \(4 prompt, 3 response\)/ }).click();
  assert.equal(await first.locator('.token-ids dd').first().textContent(), '[101,102,103,104]');
  assert.equal(await first.locator('.token-ids dd').nth(1).textContent(), '[7,8,9]');

  // Two rewards, each on the call that ended last before it (TraceToTriplet's matching).
  const marks = await page.locator('button.wf-row.llm .reward-mark').allTextContents();
  assert.deepEqual(marks, ['◆ 0.25', '◆ 1']);
  // Each reward with who gave it and its comment or reason.
  const rewards = await page
    .locator('table.rewards tbody tr')
    .evaluateAll((rows) =>
      rows.map((row) => [...row.querySelectorAll('td')].slice(1, 4).map((cell) => cell.textContent)),
    );
  assert.deepEqual(rewards, [
    ['0.25', 'agent', 'picked the tool'],
    ['1', 'judge', '17 * 23 = 391, right'],
  ]);
  await shot(page, 'rollout-tools', true);
});

test('the evaluations page shows the variants with interval bars, the paired difference and the tasks by change', async (t) => {
  const { page } = await openPage(t);
  await page.goto(`${agl.url}/evaluations`);
  const variants = page.locator('section[aria-labelledby="variants"] tbody tr');
  await variants.first().waitFor();
  assert.deepEqual(
    (await variants.allTextContents()).map((row) => row.replace(/\s+/g, ' ').trim()),
    ['plain0[0, 0]0%0/3', 'strict1[1, 1]100%0/3'],
  );
  assert.equal(await page.locator('section[aria-labelledby="variants"] .interval-bar').count(), 2);
  const pair = page.locator('section[aria-labelledby="differences"] tbody tr');
  assert.match((await pair.textContent()) ?? '', /strict − plain1\[1, 1\]0\.25not established/);
  const tasks = page.locator('section[aria-labelledby="tasks"] tbody tr');
  assert.equal(await tasks.count(), 3);
  assert.match((await tasks.first().textContent()) ?? '', /strict01\+1/);
  await shot(page, 'evaluations', true);
  await tasks.first().locator('.rollout-links a').last().click();
  await page.waitForURL(/\/rollouts\/ro-/);
  assert.match(page.url(), /\/rollouts\/ro-\w+/);
});

/** A 1x1 PNG, as an agent sends a picture inline. */
const PIXEL = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';

test("a Claude call shows the image it was sent, the model's thinking and its tool use", async (t) => {
  const { page } = await openPage(t);
  const { rollout_id, attempt } = await restPost(agl.url, '/rollouts', { input: { question: 'pixel' }, mode: 'test' });
  const t0 = Date.now() / 1000;
  await restPost(agl.url, '/spans', {
    rollout_id,
    attempt_id: attempt.attempt_id,
    trace_id: 'c1'.repeat(16),
    span_id: 'c1'.repeat(8),
    parent_id: null,
    name: 'chat claude-test',
    start_time: t0,
    end_time: t0 + 1,
    attributes: {
      'agl.llm.api': 'messages',
      'gen_ai.provider.name': 'anthropic',
      'agl.llm.request': JSON.stringify({
        model: 'claude-test',
        max_tokens: 64,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PIXEL } },
              { type: 'text', text: 'What is in the picture?' },
            ],
          },
        ],
      }),
      'agl.llm.response': JSON.stringify({
        id: 'msg_pixel',
        type: 'message',
        role: 'assistant',
        model: 'claude-test',
        content: [
          { type: 'thinking', thinking: 'A single pixel.', signature: 'sig' },
          { type: 'text', text: 'One pixel.' },
          { type: 'tool_use', id: 'toolu_9', name: 'describe', input: { pixels: 1 } },
        ],
        stop_reason: 'tool_use',
        usage: { input_tokens: 9, output_tokens: 5 },
      }),
    },
  });
  await page.goto(`${agl.url}/rollouts/${rollout_id}`);
  const call = page.locator('.call').first();
  await call.waitFor();
  assert.equal(
    await call.locator('.message.user img.part-image').getAttribute('src'),
    `data:image/png;base64,${PIXEL}`,
  );
  assert.equal(await call.locator('.message.user .text').textContent(), 'What is in the picture?');
  const answer = call.locator('.answer .message.assistant');
  await answer.locator('.thinking summary').click();
  assert.equal(await answer.locator('.thinking .text').textContent(), 'A single pixel.');
  assert.equal(await answer.locator('> .text').textContent(), 'One pixel.');
  assert.equal(await answer.locator('.tool-call code').textContent(), 'describe');
  await shot(page, 'rollout-claude', true);
});

test('the training page draws the reward curves and the APO search tree with a diff', async (t) => {
  const { page } = await openPage(t);
  await page.goto(`${agl.url}/training`);
  await page.locator('section[aria-labelledby="reward-time"] canvas').first().waitFor();
  assert.ok((await page.locator('.chart canvas').count()) >= 2, 'reward over time and per version');
  const versions = await queryRows(agl.store, 'SELECT version, is_best FROM prompt_versions ORDER BY created');
  for (const v of versions) await page.locator('.version strong', { hasText: String(v.version) }).waitFor();
  const best = versions.find((v) => v.is_best)?.version;
  assert.match((await page.locator('.version', { hasText: 'best' }).textContent()) ?? '', new RegExp(String(best)));
  // The diff of the best prompt against its parent adds the words the editor wrote.
  assert.match((await page.locator('.diff ins').first().textContent()) ?? '', /\w/);
  assert.equal(await page.locator('section[aria-labelledby="training-steps"]').count(), 0, 'no GRPO view, no section');
  await shot(page, 'training', true);
});

/** A copy of the demo's store with a `training_steps` view of three GRPO steps, as GRPO's view may name its columns. */
async function storeWithTrainingSteps(): Promise<string> {
  const path = join(dir, 'grpo.duckdb');
  await copyFile(join(dir, 'token.duckdb'), path);
  const instance = await DuckDBInstance.create(path);
  const connection = await instance.connect();
  await connection.run(`CREATE OR REPLACE VIEW training_steps AS SELECT * FROM (VALUES
    (1, 'v1', 0.20, 0.10, 0.0, 0.5, 8, 64, 51200, 3, 1, 2, 30.5, 1.2, 12.0),
    (2, 'v2', 0.45, 0.15, 0.0, 1.0, 8, 64, 50900, 2, 0, 1, 29.0, 1.1, 11.5),
    (3, 'v3', 0.70, 0.12, 0.25, 1.0, 8, 64, 50100, 1, 0, 0, 28.2, 1.0, 11.8)
  ) t(step, model_version, reward_mean, reward_std, reward_min, reward_max, groups, "rows", tokens,
      dropped_zero_variance, dropped_too_long, truncated_rows, rollout_seconds, batch_seconds, trainer_wait_seconds)`);
  connection.closeSync();
  instance.closeSync();
  return path;
}

test("GRPO's training steps are drawn when the store has that view, its columns found by name", async (t) => {
  // Opened read-only, the store keeps the view as written (a writable open re-creates agl's views).
  const { page } = await openPage(t);
  const store = await DuckDBStore.open({ path: await storeWithTrainingSteps(), readOnly: true });
  const server = await startServer(store, { port: 0 });
  t.after(async () => {
    await server.close();
    await store.close();
  });
  await page.goto(`${server.url}/training`);
  const section = page.locator('section[aria-labelledby="training-steps"]');
  await section.locator('canvas').first().waitFor();
  const titles = await section.locator('h3').allTextContents();
  assert.deepEqual(titles, [
    'Reward per step',
    'Tokens per step',
    'Rows dropped or truncated, by reason',
    'Where the time went: rollouts, batch building, the trainer',
  ]);
  assert.equal(await section.locator('canvas').count(), 4);
  await shot(page, 'training-grpo', true);
});

test('the runners page lists the workers the run used', async (t) => {
  const { page } = await openPage(t);
  await page.goto(`${agl.url}/runners`);
  const workers = await queryRows(agl.store, 'SELECT worker_id FROM workers');
  await page.getByText(`${workers.length} workers`).waitFor();
  for (const w of workers) await page.getByText(String(w.worker_id)).waitFor();
  await shot(page, 'runners');
});

test('the SQL page runs a saved example and downloads its result as CSV', async (t) => {
  const { page } = await openPage(t);
  await page.goto(`${agl.url}/sql`);
  await page.getByRole('button', { name: 'Tokens per model' }).click();
  await page.getByRole('button', { name: 'Run', exact: true }).click();
  await page.locator('section[aria-label="Result"] table tbody tr').first().waitFor();
  const expected = await queryRows(
    agl.store,
    'SELECT model, count(*) AS calls FROM llm_calls GROUP BY model ORDER BY calls DESC',
  );
  const cells = await page.locator('section[aria-label="Result"] tbody tr').first().locator('td').allTextContents();
  assert.deepEqual(cells.slice(0, 2), [String(expected[0].model), String(expected[0].calls)]);
  await shot(page, 'sql');

  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('button', { name: 'Download CSV' }).click(),
  ]);
  assert.equal(download.suggestedFilename(), 'agl-query.csv');
  const csv = (await readFile(await download.path(), 'utf8')).trim().split('\n');
  assert.equal(csv[0], 'model,calls,input_tokens,output_tokens');
  assert.equal(csv.length, expected.length + 1);
  assert.match(csv[1], new RegExp(`^${expected[0].model},${expected[0].calls},`));
});

test('a server started with --token asks for it, keeps it for the tab, and sends it with every request', async (t) => {
  // Chromium logs each 401 as an error: the page's first request, and the wrong token's. (The
  // page is opened first, so that its tab is closed before the server stops.)
  const { page, context } = await openPage(t, /status of 401/);
  const serve = await spawnServe(['--quiet', '--db', join(dir, 'token.duckdb'), '--token', TOKEN]);
  t.after(async () => {
    serve.child.kill('SIGTERM');
    await serve.exited;
  });
  const unauthorized: string[] = [];
  page.on('request', (request) => {
    if (new URL(request.url()).pathname.startsWith('/v1/') && request.headers().authorization !== `Bearer ${TOKEN}`)
      unauthorized.push(request.url());
  });
  await page.goto(serve.url);
  await page.locator('#token').waitFor();
  await shot(page, 'login');
  // The first request went without one, which is how the page learnt it needs one; a 401 logs an error.
  unauthorized.length = 0;

  await page.locator('#token').fill('wrong');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByText('The server does not take this token.').waitFor();
  unauthorized.length = 0;

  await page.locator('#token').fill(TOKEN);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('table.rollouts tbody tr').first().waitFor();
  assert.equal(await page.evaluate("sessionStorage.getItem('agl.token')"), TOKEN);
  await page.reload();
  await page.locator('table.rollouts tbody tr').first().waitFor();
  assert.deepEqual(unauthorized, []);

  // Another tab of another session has no token: it asks again.
  const other = await context.browser()?.newPage();
  await other?.goto(serve.url);
  await other?.locator('#token').waitFor();
  await other?.close();
});
