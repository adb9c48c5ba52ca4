import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DuckDBStore } from '../store/store.js';
import { Baseline } from '../algorithms/baseline.js';
import { parseCommandArgs } from './args.js';
import { EXAMPLE_MODEL, startExampleModel } from '../collector/example-model.js';
import { loadAgent } from './runner-command.js';
import { Trainer } from './trainer.js';

export const DEMO_USAGE = `agl demo [--db ./agl.duckdb]
  The whole loop on a small task set: an example agent (examples/demo/agent.mjs, plain openai
  code) runs each task, agl records its calls and rewards into the DuckDB file, and a report
  follows. Offline by default, with a bundled EXAMPLE model server that is not a language model;
  with OPENAI_API_KEY set (OPENAI_BASE_URL and AGL_DEMO_MODEL if needed) it uses that model.`;

const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'examples', 'demo', 'agent.mjs');

const TASKS = [
  [12, '+', 30], [7, '*', 6], [100, '-', 58], [9, '*', 9], [250, '+', 250],
  [81, '-', 39], [13, '*', 4], [64, '+', 36], [144, '-', 44], [11, '*', 11],
].map(([a, op, b]) => ({
  question: `What is ${a} ${op} ${b}?`,
  answer: op === '+' ? Number(a) + Number(b) : op === '-' ? Number(a) - Number(b) : Number(a) * Number(b),
}));

export async function demo(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, { db: { type: 'string', default: './agl.duckdb' } });
  const db = resolve(values.db);
  const real = process.env.OPENAI_API_KEY;
  const example = real ? undefined : await startExampleModel();
  const llm = {
    resource_type: 'llm' as const,
    endpoint: example?.baseURL ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
    model: example ? EXAMPLE_MODEL : (process.env.AGL_DEMO_MODEL ?? 'gpt-4o-mini'),
    api_key: real ?? null,
    sampling_parameters: { temperature: 0 },
  };
  console.log(example
    ? 'agl demo: using the bundled offline EXAMPLE model server (rule-based arithmetic, not a language model)'
    : `agl demo: using ${llm.model} at ${llm.endpoint}`);
  try {
    const agent = await loadAgent(AGENT);
    const prompt = { resource_type: 'prompt_template' as const, template: 'Answer with the number only. {question}', engine: 'f-string' as const };
    const result = await new Trainer({ algorithm: new Baseline({ resources: { llm, prompt } }), nRunners: 4, db }).fit(agent, { train: TASKS });

    const store = await DuckDBStore.open({ path: db, readOnly: true });
    let usage: Record<string, unknown>;
    try {
      const ids = result.rollouts.map((r) => `'${r.rollout_id}'`).join(',') || "''";
      usage = (await store.query(`SELECT count(*)::INTEGER AS calls, coalesce(sum(input_tokens), 0)::INTEGER AS input, coalesce(sum(output_tokens), 0)::INTEGER AS output
        FROM llm_calls WHERE rollout_id IN (${ids})`, { guard: false })).rows[0];
    } finally {
      await store.close();
    }
    const percent = result.total ? Math.round((100 * result.succeeded) / result.total) : 0;
    console.log(`
rollouts      ${result.total} (${result.succeeded} succeeded, ${result.failed} failed: ${percent}% success)
mean reward   ${result.meanReward === null ? '-' : result.meanReward.toFixed(2)}
LLM calls     ${usage.calls}, ${usage.input} input and ${usage.output} output tokens
stored in     ${db}

Look further:
  npm run agl -- query "SELECT rollout_id, model, output_messages, output_tokens FROM llm_calls" --db ${values.db}
  npm run agl -- query "SELECT rollout_id, value FROM rewards" --db ${values.db}
  npm run agl -- export triplets --db ${values.db} --out triplets.jsonl`);
  } finally {
    await example?.close();
  }
}
