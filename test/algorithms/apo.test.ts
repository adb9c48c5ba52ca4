import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { APO, type APOOptionsInput, type APOResult } from '../../src/algorithms/apo/index.js';
import { ChatModel } from '../../src/algorithms/shared/chat-model.js';
import type { NamedResources } from '../../src/api/types.js';
import { Trainer } from '../../src/runtime/trainer.js';
import { CLI, fileRows, runCli, tempDir, until } from '../support/helpers.js';
import { APPS } from '../support/instrumented-app.js';
import { startOpenAITestServer, type ChatScript, type OpenAITestServer } from '../support/openai-server.js';

// APO against the OpenAI-compatible test server, which plays all three models:
// - agent-model answers task qN right when the prompt says CAREFUL, wrong when it says SLOPPY,
//   and otherwise right for even N only (the seed prompt scores 0.5);
// - critic-model answers a critique (or what a test scripts: errors, delays);
// - editor-model answers, call after call: an edit that helps, one that hurts, one that drops
//   the {question} placeholder, and the prompt unchanged.

const AGENT = join(APPS, 'apo-agent.mjs');
const SEED = 'Answer: {question}';
const EDITS = ['Be CAREFUL. Answer: {question}', 'Be SLOPPY. Answer: {question}', 'Be CAREFUL. Answer.', SEED];
const task = (n: number) => ({ question: `q${n}`, answer: `a${n}` });
const TRAIN = [0, 1, 2, 3, 4, 5].map(task);
const VAL = [10, 11, 12, 13, 14, 15, 16, 17].map(task);

interface Models {
  readonly server: OpenAITestServer;
  readonly calls: { critic: number; editor: number };
}

async function startModels(
  t: { after(fn: () => Promise<void>): void },
  critic?: (call: number) => ChatScript | undefined,
): Promise<Models> {
  const calls = { critic: 0, editor: 0 };
  const server = await startOpenAITestServer({
    chat: (body) => {
      const text = String(body.messages.at(-1)?.content ?? '');
      if (body.model === 'critic-model') {
        calls.critic++;
        return critic?.(calls.critic) ?? { content: '- Ask the model to be careful.' };
      }
      if (body.model === 'editor-model') return { content: `<prompt>${EDITS[calls.editor++ % EDITS.length]}</prompt>` };
      const n = Number(/q(\d+)/.exec(text)?.[1]);
      const right = text.includes('CAREFUL') || (!text.includes('SLOPPY') && n % 2 === 0);
      return { content: right ? `a${n}` : 'no idea' };
    },
  });
  t.after(() => server.close());
  return { server, calls };
}

function resources(server: OpenAITestServer): NamedResources {
  return {
    llm: {
      resource_type: 'llm',
      endpoint: server.baseURL,
      model: 'agent-model',
      api_key: null,
      sampling_parameters: {},
    },
    prompt: { resource_type: 'prompt_template', template: SEED, engine: 'f-string' },
  };
}

const OPTIONS: APOOptionsInput = {
  beamWidth: 2,
  branchFactor: 2,
  rounds: 2,
  gradientBatchSize: 2,
  valBatchSize: 4,
  criticModel: 'critic-model',
  editorModel: 'editor-model',
  apiKey: 'test',
  concurrency: 1,
  retryBackoffSeconds: 0.01,
  seed: 7,
};

async function runApo(
  models: Models,
  db: string,
  options: APOOptionsInput & { resources?: NamedResources | null } = {},
  log: string[] = [],
): Promise<APOResult> {
  const { resources: given, ...rest } = options;
  const apo = new APO({
    ...OPTIONS,
    baseURL: models.server.baseURL,
    resources: given === null ? undefined : (given ?? resources(models.server)),
    log: (line) => log.push(line),
    ...rest,
  });
  return new Trainer({ algorithm: apo, nRunners: 4, db, progress: false }).fit(AGENT, { train: TRAIN, val: VAL });
}

test('APO finds the prompt that helps, rejects the one without its placeholder, and leaves every version in the store', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  const db = join(dir, 'apo.duckdb');
  const out = join(dir, 'best.txt');
  const result = await runApo(models, db, { out });

  assert.equal(result.stopped, 'completed');
  assert.equal(result.rounds, 2);
  assert.equal(result.seed.valScore, 0.5);
  assert.equal(result.best.template, 'Be CAREFUL. Answer: {question}');
  assert.equal(result.best.valScore, 1);
  // Paired on the 8 validation tasks: the 4 odd ones gained 1; 4 changed tasks cannot reach p < 0.05.
  assert.equal(result.improvement?.mean, 0.5);
  assert.equal(result.improvement?.tasks, 8);
  assert.equal(result.improvement?.pValue, 0.125);
  assert.ok((result.improvement?.low ?? 0) > 0 && (result.improvement?.high ?? 1) < 1);
  assert.equal(await readFile(out, 'utf8'), 'Be CAREFUL. Answer: {question}\n');

  const versions = await fileRows(
    db,
    'SELECT version, parent, round, status, reason, template, critique, batch_score, val_score, is_best, resources_id FROM prompt_versions',
  );
  assert.deepEqual(
    versions.map((v) => [v.version, v.parent, v.round, v.status, v.template, v.is_best]),
    [
      ['v0', null, 0, 'seed', SEED, false],
      ['v1', 'v0', 1, 'candidate', EDITS[0], true],
      ['v2', 'v0', 1, 'candidate', EDITS[1], false],
      ['v3', 'v0', 1, 'rejected', EDITS[2], false],
    ],
  );
  assert.equal(versions[1].batch_score, 1);
  assert.equal(versions[2].batch_score, 0);
  assert.equal(versions[1].critique, '- Ask the model to be careful.');
  assert.match(String(versions[3].reason), /drops the placeholder \{question\}/);
  assert.equal(versions[3].resources_id, null);

  // The rejected candidate never ran; the best is the latest resources.
  const ran = await fileRows(
    db,
    "SELECT DISTINCT metadata->>'agl_apo_version' AS version FROM rollouts WHERE metadata->>'agl_run' IS NOT NULL ORDER BY 1",
  );
  assert.deepEqual(
    ran.map((r) => r.version),
    ['v0', 'v1', 'v2'],
  );
  const [latest] = await fileRows(
    db,
    "SELECT resources_id, resources->'prompt'->>'template' AS template, resources->'llm'->>'model' AS model FROM resources ORDER BY update_time DESC LIMIT 1",
  );
  assert.deepEqual(latest, { resources_id: versions[1].resources_id, template: EDITS[0], model: 'agent-model' });
});

test('APO gives the same search with the same seed', async (t) => {
  const dir = await tempDir(t);
  const summary = (result: APOResult) =>
    result.candidates.map(({ version, parent, round, template, batchScore, valScore, rejected }) => ({
      version,
      parent,
      round,
      template,
      batchScore,
      valScore,
      rejected,
    }));
  const criticInputs = (models: Models) =>
    models.server.requests.filter((r) => r.body.model === 'critic-model').map((r) => r.body.messages?.at(-1)?.content);
  const first = await startModels(t);
  const a = await runApo(first, join(dir, 'a.duckdb'));
  const second = await startModels(t);
  const b = await runApo(second, join(dir, 'b.duckdb'));
  assert.deepEqual(summary(a), summary(b));
  // The critic saw the same tasks, runs and rewards in the same order.
  assert.deepEqual(criticInputs(first), criticInputs(second));
  assert.equal(criticInputs(first).length, 8);
});

test("APO's critic prompt contains the agents' feedback texts", async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  await runApo(models, join(dir, 'feedback.duckdb'), { rounds: 1 });
  const [critic] = models.server.requests.filter((r) => r.body.model === 'critic-model');
  const prompt = String(critic.body.messages?.at(-1)?.content);
  assert.match(prompt, /<feedback>expected a\d+<\/feedback>/);
  assert.match(prompt, /<feedback>right<\/feedback>/);
});

test('APO stops cleanly when its rollout budget would be passed, and when its token budget is spent', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  // The seed takes 8 rollouts, round 1's critiques 8 and its batch 12: the leader's 8 would pass 30.
  const log: string[] = [];
  const db = join(dir, 'rollouts.duckdb');
  const byRollouts = await runApo(models, db, { maxRollouts: 30 }, log);
  assert.equal(byRollouts.stopped, 'budget');
  assert.match(byRollouts.stopReason, /rollout budget \(30\) does not cover the next 8 rollouts \(28 spent\)/);
  assert.equal(byRollouts.best.version, 'v0');
  const [{ n }] = await fileRows(
    db,
    "SELECT count(*)::INTEGER AS n FROM rollouts WHERE metadata->>'agl_run' IS NOT NULL",
  );
  assert.equal(n, 28);
  // The cost is what the run spent, round 1's rollouts before the budget stopped it included.
  assert.equal(byRollouts.cost.total.rollouts, 28);
  assert.equal(byRollouts.rounds, 0, 'no round was completed');
  assert.deepEqual(
    byRollouts.cost.rounds.map((c) => [c.round, c.rollouts]),
    [
      [0, 8],
      [1, 20],
    ],
  );

  const before = models.calls.critic + models.calls.editor;
  const byTokens = await runApo(models, join(dir, 'tokens.duckdb'), { maxTokens: 1 });
  assert.equal(byTokens.stopped, 'budget');
  assert.match(byTokens.stopReason, /token budget \(1\) is spent/);
  assert.equal(models.calls.critic + models.calls.editor - before, 1, 'one call, then none');
});

test('APO retries a critic that fails or times out, then skips the branch with the reason', async (t) => {
  const dir = await tempDir(t);
  // Calls 1-2 answer 503, call 3 answers too late, call 4 answers: the first branch gets its
  // critique on the 4th try. Calls 5-8 answer 500: the second branch is skipped after 4 tries.
  const models = await startModels(t, (call) =>
    call <= 2 ? { status: 503 } : call === 3 ? { delayMs: 3000 } : call <= 8 && call >= 5 ? { status: 500 } : undefined,
  );
  const log: string[] = [];
  const result = await runApo(models, join(dir, 'critic.duckdb'), { retries: 3, requestTimeoutSeconds: 0.5 }, log);
  assert.equal(result.stopped, 'completed');
  assert.equal(result.best.template, EDITS[0], 'the first branch still made the edit that helps');
  assert.ok(
    log.some((line) => /critic critic-model: .*answered 503.*; try 2 of 4/.test(line)),
    log.join('\n'),
  );
  assert.ok(
    log.some((line) => /critic critic-model: no answer .*within 0.5 s; try 4 of 4/.test(line)),
    log.join('\n'),
  );
  assert.ok(
    log.some((line) => /an edit of v0 skipped: the critic failed: .*answered 500.*\(after 4 tries\)/.test(line)),
    log.join('\n'),
  );
});

test('a model answer no retry changes fails at once', async (t) => {
  const server = await startOpenAITestServer({ chat: () => ({ status: 401 }) });
  t.after(() => server.close());
  const model = new ChatModel(
    { baseURL: server.baseURL, model: 'm' },
    { retries: 3, backoffSeconds: 0.01, timeoutSeconds: 5 },
  );
  await assert.rejects(
    model.complete([{ role: 'user', content: 'hi' }]),
    (error: Error & { tries?: number }) => error.tries === 1 && /answered 401/.test(error.message),
  );
});

test('APO resumes a run from the store: its later rounds add to the same run', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  const db = join(dir, 'resume.duckdb');
  const first = await runApo(models, db, { rounds: 1 });
  assert.equal(first.rounds, 1);
  // Resumed with resources from nowhere: the run's own are used.
  const log: string[] = [];
  const second = await runApo(models, db, { rounds: 3, resume: true, resources: null }, log);
  assert.equal(second.runId, first.runId);
  assert.equal(second.rounds, 3);
  assert.equal(second.best.template, EDITS[0]);
  assert.ok(
    log.some((line) => line.includes(`resuming ${first.runId} (session 2) after round 1`)),
    log.join('\n'),
  );
  const sessions = await fileRows(
    db,
    'SELECT session, count(*)::INTEGER AS n, max(round) AS last FROM prompt_versions GROUP BY session ORDER BY session',
  );
  assert.deepEqual(sessions[0], { session: 1, n: 4, last: 1 });
  const rounds = await fileRows(db, "SELECT count(*)::INTEGER AS n FROM spans WHERE name = 'agl.apo.round'");
  assert.equal(rounds[0].n, 4, 'rounds 0 to 3, each checkpointed once');
});

test('agl train apo: options from a YAML file, flags over them; a bad file is named with what is wrong', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  await writeFile(join(dir, 'train.jsonl'), TRAIN.map((x) => JSON.stringify(x)).join('\n'));
  await writeFile(join(dir, 'val.jsonl'), VAL.map((x) => JSON.stringify(x)).join('\n'));
  const config = `algorithm: apo
agent: ${AGENT}
train: train.jsonl
val: val.jsonl
db: run.duckdb
prompt: "${SEED}"
llm-model: agent-model
llm_endpoint: ${models.server.baseURL}
criticModel: critic-model
editorModel: editor-model
baseURL: ${models.server.baseURL}
apiKey: test
beamWidth: 2
branchFactor: 2
rounds: 3
gradientBatchSize: 2
valBatchSize: 4
concurrency: 1
retryBackoffSeconds: 0.01
seed: 7
out: best.txt
`;
  await writeFile(join(dir, 'run.yaml'), config);
  const run = await runCli(['train', 'apo', '--config', join(dir, 'run.yaml'), '--rounds', '1']);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /APO run ro-\w+: 1 round completed; stopped: 1 round done/);
  assert.match(run.stdout, /seed score {2}0\.500/);
  assert.match(run.stdout, /best score {2}1\.000 {2}\(v1\)/);
  assert.match(
    run.stdout,
    /best - seed: \+0\.500 \[\+0\.\d+, \+0\.\d+\] over 8 validation tasks, p = 0\.125\n {2}not established/,
  );
  assert.match(run.stdout, /\{\+Be CAREFUL\.\+\} Answer: \{question\}/);
  assert.match(run.stderr, /apo: round 1\/1: leader v1 scores 1\.000/);
  assert.equal(await readFile(join(dir, 'best.txt'), 'utf8'), `${EDITS[0]}\n`);
  assert.equal((await fileRows(join(dir, 'run.duckdb'), 'SELECT count(*)::INTEGER AS n FROM prompt_versions'))[0].n, 4);

  await writeFile(join(dir, 'typo.yaml'), config.replace('beamWidth: 2', 'beamWdith: 2'));
  const typo = await runCli(['train', 'apo', '--config', join(dir, 'typo.yaml')]);
  assert.equal(typo.code, 2);
  assert.match(typo.stderr, /unknown option beamWdith \(from .*typo\.yaml\)/);

  await writeFile(join(dir, 'zero.yaml'), config.replace('beamWidth: 2', 'beamWidth: 0'));
  const zero = await runCli(['train', 'apo', '--config', join(dir, 'zero.yaml'), '--rounds', 'two']);
  assert.equal(zero.code, 2);
  assert.match(zero.stderr, /invalid apo options:/);
  assert.match(zero.stderr, /beamWidth \(from .*zero\.yaml\) must be an integer >= 1 \(given 0\)/);
  assert.match(zero.stderr, /--rounds must be an integer \(given "two"\)/);
  assert.equal(zero.stderr.trim().split('\n').length, 1, zero.stderr);
});

/** One line on stderr, no stack frame, exit 2: an error a person reads and fixes. */
function assertUsageLine(result: { code: number | null; stderr: string }, message: RegExp): void {
  assert.equal(result.code, 2, result.stderr);
  assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
  assert.doesNotMatch(result.stderr, / {4}at /);
  assert.match(result.stderr.trim(), message);
}

test('agl train apo: a missing flag and bad options are one line naming the flag or key as written', async (t) => {
  const dir = await tempDir(t);
  assertUsageLine(
    await runCli(['train', 'apo']),
    /^agl: train apo needs --agent FILE \(the agent module: [^)]*\)\) and --train FILE \(training tasks[^)]*\)$/,
  );
  await writeFile(join(dir, 'run.yaml'), 'beam_width: 0\nfoo: 1\n');
  assertUsageLine(
    await runCli([
      'train',
      'apo',
      '--config',
      join(dir, 'run.yaml'),
      '--agent',
      AGENT,
      '--train',
      't.jsonl',
      '--branch-factor',
      '0',
    ]),
    /^agl: invalid apo options: beam_width \(from .*run\.yaml\) must be an integer >= 1 \(given 0\); --branch-factor must be an integer >= 1 \(given "0"\); unknown option foo \(from .*run\.yaml\)$/,
  );
});

test('agl train apo: a rollout budget that cannot score the seed prompt is refused before any rollout', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  await writeFile(join(dir, 'train.jsonl'), TRAIN.map((x) => JSON.stringify(x)).join('\n'));
  await writeFile(
    join(dir, 'val.jsonl'),
    VAL.slice(0, 6)
      .map((x) => JSON.stringify(x))
      .join('\n'),
  );
  const db = join(dir, 'run.duckdb');
  const run = await runCli([
    'train',
    'apo',
    '--agent',
    AGENT,
    '--train',
    join(dir, 'train.jsonl'),
    '--val',
    join(dir, 'val.jsonl'),
    '--db',
    db,
    '--prompt',
    SEED,
    '--llm-model',
    'agent-model',
    '--llm-endpoint',
    models.server.baseURL,
    '--base-url',
    models.server.baseURL,
    '--max-rollouts',
    '2',
  ]);
  assertUsageLine(
    run,
    /^agl: --max-rollouts 2 cannot score the seed prompt: that takes 6 rollouts \(one per validation task\); raise --max-rollouts to at least 6$/,
  );
  assert.equal((await fileRows(db, 'SELECT count(*)::INTEGER AS n FROM rollouts'))[0].n, 0);
  assert.equal(models.calls.critic + models.calls.editor, 0);
});

test('new APO with a bad option: a TypeError naming the option key', () => {
  assert.throws(
    () => new APO({ beamWidth: 0, rounds: 'two' as never, fooBar: 1 } as APOOptionsInput),
    (error: Error) =>
      error instanceof TypeError &&
      error.message ===
        'invalid APO options: beamWidth must be an integer >= 1 (given 0); rounds must be an integer (given "two"); unknown option fooBar',
  );
});

test('agl train apo: Ctrl-C keeps the best prompt so far; --resume finishes the run', async (t) => {
  const dir = await tempDir(t);
  const models = await startModels(t);
  await writeFile(join(dir, 'train.jsonl'), TRAIN.map((x) => JSON.stringify(x)).join('\n'));
  await writeFile(join(dir, 'val.jsonl'), VAL.map((x) => JSON.stringify(x)).join('\n'));
  const args = [
    'train',
    'apo',
    '--agent',
    AGENT,
    '--train',
    join(dir, 'train.jsonl'),
    '--val',
    join(dir, 'val.jsonl'),
    '--db',
    join(dir, 'stop.duckdb'),
  ];
  const flags = [
    '--prompt',
    SEED,
    '--llm-model',
    'agent-model',
    '--llm-endpoint',
    models.server.baseURL,
    '--critic-model',
    'critic-model',
    '--editor-model',
    'editor-model',
  ];
  const more = [
    '--base-url',
    models.server.baseURL,
    '--beam-width',
    '2',
    '--branch-factor',
    '2',
    '--rounds',
    '2',
    '--gradient-batch-size',
    '2',
    '--val-batch-size',
    '4',
  ];
  const child = spawn(
    process.execPath,
    [CLI, ...args, ...flags, ...more, '--concurrency', '1', '--seed', '7', '--out', join(dir, 'best.txt')],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OPENAI_API_KEY: 'test' },
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await until(async () => assert.match(stderr, /round 1\/2: \d+ critiques/), 60_000);
  child.kill('SIGINT');
  assert.equal(await exited, 0, stderr);
  assert.match(stdout, /stopped: stopped by a signal \(Ctrl-C\): the best prompt so far is kept/);
  assert.equal(await readFile(join(dir, 'best.txt'), 'utf8'), `${SEED}\n`);
  const runs = await fileRows(
    join(dir, 'stop.duckdb'),
    "SELECT status FROM rollouts WHERE metadata->>'agl_algorithm' = 'apo'",
  );
  assert.deepEqual(runs, [{ status: 'cancelled' }]);
  const open = await fileRows(
    join(dir, 'stop.duckdb'),
    "SELECT count(*)::INTEGER AS n FROM rollouts WHERE metadata->>'agl_run' IS NOT NULL AND status NOT IN ('succeeded', 'failed')",
  );
  assert.equal(open[0].n, 0, 'the evaluation in flight was finished');

  const resumed = await runCli([...args, ...flags, ...more, '--resume'], {
    env: { ...process.env, OPENAI_API_KEY: 'test' },
  });
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.match(resumed.stdout, /2 rounds completed; stopped: 2 rounds done/);
  assert.match(resumed.stdout, /best score {2}1\.000/);
  assert.match(resumed.stdout, /best - seed: \+0\.500 .* over 8 validation tasks/, "the seed's rewards read back");
});
