import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBStore } from '../store/store.js';
import { APO } from '../algorithms/apo/index.js';
import type { APOResult } from '../algorithms/apo/index.js';
import { wordDiff } from '../algorithms/shared/word-diff.js';
import { formatDifference } from '../algorithms/eval/index.js';
import { parseCommandArgs } from './args.js';
import { EXAMPLE_CRITIC_MODEL, EXAMPLE_EDITOR_MODEL, EXAMPLE_MODEL, startExampleModel } from './example-model.js';
import { loadAgent } from '../runner/load-agent.js';
import { Trainer } from './trainer.js';
import type { LlmResource, PromptTemplateResource } from '../api/types.js';

export const DEMO_USAGE = `agl demo [--db ./agl.duckdb]
  The whole loop on a small task set: an example agent (examples/demo/agent.mjs, plain openai
  code) runs each task with a first prompt, agl records its calls and rewards into the DuckDB
  file, then APO improves the prompt (a critic reads the runs, an editor rewrites the prompt, a
  beam search keeps the best) and a report follows. Offline by default, with a bundled EXAMPLE
  model server whose agent model, critic and editor are rules, not language models; with
  OPENAI_API_KEY set (OPENAI_BASE_URL and AGL_DEMO_MODEL if needed) it uses that model for all three.`;

const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'examples', 'demo', 'agent.mjs');

type Op = '+' | '-' | '*';
const task = ([a, op, b]: [number, Op, number]) => ({
  question: `What is ${a} ${op} ${b}?`,
  answer: op === '+' ? a + b : op === '-' ? a - b : a * b,
});

const VAL = (
  [
    [12, '+', 30],
    [7, '*', 6],
    [100, '-', 58],
    [9, '*', 9],
    [250, '+', 250],
    [81, '-', 39],
    [13, '*', 4],
    [64, '+', 36],
    [144, '-', 44],
    [11, '*', 11],
  ] as [number, Op, number][]
).map(task);
const TRAIN = (
  [
    [23, '+', 19],
    [8, '*', 7],
    [90, '-', 27],
    [6, '*', 12],
    [125, '+', 75],
    [70, '-', 33],
    [14, '*', 3],
    [48, '+', 52],
    [200, '-', 85],
    [12, '*', 12],
  ] as [number, Op, number][]
).map(task);

/** The first prompt: it asks for nothing, so answers come as sentences (and the reward reads their first number). */
const SEED_PROMPT: PromptTemplateResource = {
  resource_type: 'prompt_template',
  template: '{question}',
  engine: 'f-string',
};

export async function demo(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, { db: { type: 'string', default: './agl.duckdb' } });
  const db = resolve(values.db);
  const real = process.env.OPENAI_API_KEY;
  const example = real ? undefined : await startExampleModel();
  const model = process.env.AGL_DEMO_MODEL ?? 'gpt-4o-mini';
  const llm: LlmResource = {
    resource_type: 'llm',
    endpoint: example?.baseURL ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
    model: example ? EXAMPLE_MODEL : model,
    api_key: real ?? null,
    sampling_parameters: { temperature: 0 },
  };
  console.log(
    example
      ? 'agl demo: using the bundled offline EXAMPLE model server (rule-based arithmetic, critic and editor, not language models)'
      : `agl demo: using ${llm.model} at ${llm.endpoint} as agent model, critic and editor`,
  );
  try {
    const agent = await loadAgent(AGENT);
    console.error('agl demo: APO, 2 rounds of beam search over the prompt; its progress:');
    const apo = new APO({
      resources: { llm, prompt: SEED_PROMPT },
      beamWidth: 2,
      branchFactor: 2,
      rounds: 2,
      gradientBatchSize: 4,
      valBatchSize: VAL.length,
      criticModel: example ? EXAMPLE_CRITIC_MODEL : model,
      editorModel: example ? EXAMPLE_EDITOR_MODEL : model,
      baseURL: llm.endpoint,
      apiKey: real,
      seed: 1,
    });
    const result = await new Trainer({ algorithm: apo, nRunners: 8, db, progress: false }).fit(agent, {
      train: TRAIN,
      val: VAL,
    });
    console.log(
      `\n1. The first prompt ${JSON.stringify(SEED_PROMPT.template)} on the ${VAL.length} validation tasks (the baseline)`,
    );
    console.log(await seedReport(db, result.runId));
    console.log(`\n2. APO: ${result.rounds} rounds of critique, edit and beam search over the prompt`);
    console.log(apoReport(result, db, values.db));
  } finally {
    await example?.close();
  }
}

/** The seed prompt's rollouts on the validation set, their rewards and LLM calls, read back from the file with SQL. */
async function seedReport(db: string, runId: string): Promise<string> {
  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const seed = `SELECT rollout_id, status FROM rollouts WHERE (metadata->>'agl_run') = '${runId}' AND (metadata->>'agl_apo_version') = 'v0' AND (metadata->>'agl_apo_split') = 'val'`;
    const { rows } = await store.query(
      `WITH seed AS (${seed})
      SELECT (SELECT count(*) FROM seed)::INTEGER AS total, (SELECT count(*) FROM seed WHERE status = 'succeeded')::INTEGER AS succeeded,
        (SELECT avg(value) FROM rewards WHERE is_primary AND rollout_id IN (SELECT rollout_id FROM seed)) AS reward,
        (SELECT count(*) FROM llm_calls WHERE rollout_id IN (SELECT rollout_id FROM seed))::INTEGER AS calls,
        (SELECT coalesce(sum(input_tokens), 0) FROM llm_calls WHERE rollout_id IN (SELECT rollout_id FROM seed))::INTEGER AS input,
        (SELECT coalesce(sum(output_tokens), 0) FROM llm_calls WHERE rollout_id IN (SELECT rollout_id FROM seed))::INTEGER AS output`,
      { guard: false },
    );
    const r = rows[0] as {
      total: number;
      succeeded: number;
      reward: number | null;
      calls: number;
      input: number;
      output: number;
    };
    const percent = r.total ? Math.round((100 * r.succeeded) / r.total) : 0;
    return `rollouts      ${r.total} (${r.succeeded} succeeded, ${r.total - r.succeeded} failed: ${percent}% success)
mean reward   ${r.reward === null ? '-' : r.reward.toFixed(2)}
LLM calls     ${r.calls}, ${r.input} input and ${r.output} output tokens`;
  } finally {
    await store.close();
  }
}

function apoReport(result: APOResult, db: string, dbArg: string): string {
  const { total } = result.cost;
  const changes =
    result.best.version === result.seed.version
      ? '(none: the first prompt stayed the best)'
      : wordDiff(result.seed.template, result.best.template);
  const improvement = result.improvement
    ? formatDifference('first', 'optimized', result.improvement, 'validation tasks (paired, 95% interval)').join(
        '\n                 ',
      )
    : '-';
  return `
baseline score   ${result.seed.valScore?.toFixed(2) ?? '-'}  (first prompt, all validation tasks)
optimized score  ${result.best.valScore?.toFixed(2) ?? '-'}  (${result.best.version}, ${result.candidates.length} prompt versions tried)
improvement      ${improvement}
best prompt      ${JSON.stringify(result.best.template)}
changes          ${changes}
search cost      ${total.rollouts} rollouts, ${total.criticTokens} critic and ${total.editorTokens} editor tokens, ${total.seconds.toFixed(1)} s
stored in        ${db}

Look further:
  npm run agl -- query "SELECT version, round, parent, batch_score, val_score, status, template FROM prompt_versions" --db ${dbArg}
  npm run agl -- query "SELECT rollout_id, model, output_messages, output_tokens FROM llm_calls" --db ${dbArg}
  npm run agl -- export triplets --db ${dbArg} --out triplets.jsonl
  npm run agl -- train apo --help`;
}
