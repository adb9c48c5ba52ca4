import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { spanRows, type SpanInput } from '../src/store/span-json.js';
import { DuckDBStore } from '../src/store/store.js';
import { CLI, newTempDir, removeDir } from '../test/support/helpers.js';
import { span } from '../test/support/span-fixtures.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

// 100,000 rollouts, as the issue asks (AGL_BENCH_ROLLOUTS for another count).
const ROLLOUTS = Number(process.env.AGL_BENCH_ROLLOUTS ?? 100_000);
const CALLS = 6;
const BATCH = 500;

const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');

/**
 * A span of rollout `r` (trace r + 1) with the bench's resource; `at` in hundredths of a second
 * into the rollout, lasting one.
 */
export function benchSpan(
  r: number,
  attempt: string,
  id: number,
  name: string,
  at: number,
  attributes: Record<string, unknown>,
  parent: string | null = null,
): SpanInput {
  return span({
    rollout_id: `ro-${r}`,
    attempt_id: attempt,
    trace: r + 1,
    span_id: hex(id, 16),
    parent_id: parent,
    name,
    attributes,
    start: 1_700_000_000 + r + at / 100,
    end: 1_700_000_000 + r + (at + 1) / 100,
    resource: { attributes: { 'service.name': 'bench' }, schema_url: '' },
  });
}

/** One rollout: an agent span, 6 LLM calls with messages and token ids, 4 tool spans, a reward (12 spans). */
export function rolloutSpans(r: number): SpanInput[] {
  let id = 0;
  const base = (name: string, start: number, attributes: Record<string, unknown>, parent: string | null) =>
    benchSpan(r, 'at-1', r * 16 + ++id, name, start, attributes, parent);
  const root = base('agent', 0, { 'agent.name': 'solver' }, null);
  const spans = [root];
  let prompt = [1, 2, 3, 4, 5, 6, 7, 8];
  for (let c = 0; c < CALLS; c++) {
    const response = [100 + c, 101 + c, 102 + c, 103 + c, 104 + c, 105 + c, 106 + c, 107 + c];
    spans.push(
      base(
        'chat bench',
        10 * c + 1,
        {
          'agl.llm.api': 'chat',
          'agl.llm.request': JSON.stringify({
            model: 'bench',
            messages: [
              { role: 'system', content: 'Solve the task.' },
              { role: 'user', content: `task ${r} step ${c}` },
            ],
          }),
          'agl.llm.response': JSON.stringify({
            id: `resp-${r}-${c}`,
            model: 'bench',
            prompt_token_ids: prompt,
            usage: { prompt_tokens: prompt.length, completion_tokens: 8 },
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: `step ${c} of task ${r}` },
                finish_reason: 'stop',
                token_ids: response,
              },
            ],
          }),
        },
        root.span_id,
      ),
    );
    if (c < 4) spans.push(base('execute_tool search', 10 * c + 3, { 'gen_ai.tool.name': 'search' }, root.span_id));
    prompt = [...prompt, ...response, 9, 9];
  }
  spans.push(
    base(
      'agentlightning.annotation',
      99,
      { 'agentlightning.reward.0.name': 'primary', 'agentlightning.reward.0.value': r % 2 },
      root.span_id,
    ),
  );
  return spans;
}

/** Runs the CLI; answers the seconds it took. */
export function timeCli(args: string[]): Promise<number> {
  const start = performance.now();
  return new Promise((resolve, reject) =>
    execFile(process.execPath, [CLI, ...args], { maxBuffer: 16 * 1024 * 1024 }, (error, _stdout, stderr) =>
      error
        ? reject(new Error(`agl ${args.join(' ')} failed: ${stderr}`))
        : resolve((performance.now() - start) / 1000),
    ),
  );
}

/**
 * DuckDB's own scan of what a triplet export reads, on the same terms: the closed file in a
 * fresh instance (the export's process opens it cold, so blocks are read and decompressed
 * again), every column a triplet holds, list elements included, the rows the export writes.
 */
async function scanSecondsOf(db: string): Promise<number> {
  const store = await DuckDBStore.open({ path: db, readOnly: true });
  try {
    const start = performance.now();
    await store.query(
      `SELECT sum(length(input_messages::VARCHAR) + length(output_messages::VARCHAR) + list_sum(prompt_token_ids)
        + list_sum(response_token_ids) + coalesce(list_sum(response_logprobs), 0) + coalesce(reward, 0) + sequence_id
        + length(rollout_id) + length(attempt_id) + length(trace_id) + length(span_id) + length(agent_name)
        + length(response_id) + length(model)) FROM derived_calls WHERE in_triplets`,
      { guard: false },
    );
    return (performance.now() - start) / 1000;
  } finally {
    await store.close();
  }
}

/** A store of one derived rollout, whose export is the command's fixed cost: node, DuckDB, the file's open. */
async function oneRolloutStore(dir: string): Promise<string> {
  const db = join(dir, 'one-rollout.duckdb');
  const store = await DuckDBStore.open({ path: db });
  try {
    await store.writeSpans(spanRows(...rolloutSpans(0)), 0);
    await store.deriveAll();
  } finally {
    await store.close();
  }
  return db;
}

/** Export of a recorded store to Parquet, each adapter through `agl export`, against DuckDB's own scan of the same column. */
export const adapters: Benchmark = {
  name: 'adapters',
  description: `dataset export of ${ROLLOUTS} rollouts x 12 spans to Parquet`,
  async run(size: Size): Promise<Figure[]> {
    const rollouts = sized(size, ROLLOUTS, 200);
    const dir = await newTempDir();
    const db = join(dir, 'adapters-bench.duckdb');
    try {
      const store = await DuckDBStore.open({ path: db });
      const storeStart = performance.now();
      for (let r = 0; r < rollouts; r += BATCH) {
        const spans: SpanInput[] = [];
        for (let i = r; i < Math.min(rollouts, r + BATCH); i++) spans.push(...rolloutSpans(i));
        await store.writeSpans(spanRows(...spans), 0);
      }
      const spanCount = rollouts * 12;
      const storeSeconds = (performance.now() - storeStart) / 1000;
      // What the server's deriver does while idle, done at once here (src/sql/derived.ts).
      const deriveStart = performance.now();
      await store.deriveAll();
      const deriveSeconds = (performance.now() - deriveStart) / 1000;
      console.error(
        `  stored ${spanCount} spans in ${storeSeconds.toFixed(1)} s, derived them in ${deriveSeconds.toFixed(1)} s`,
      );
      await store.close();
      const scanSeconds = await scanSecondsOf(db);
      const startSeconds = await timeCli([
        'export',
        'triplets',
        '--db',
        await oneRolloutStore(dir),
        '--out',
        join(dir, 'one.parquet'),
      ]);
      const rates: Record<string, number> = {};
      for (const kind of ['triplets', 'messages', 'trajectories']) {
        rates[kind] = spanCount / (await timeCli(['export', kind, '--db', db, '--out', join(dir, `${kind}.parquet`)]));
      }
      const scanRate = spanCount / scanSeconds;
      const tripletSeconds = spanCount / rates.triplets;
      return [
        { name: 'export triplets to parquet', value: Math.round(rates.triplets), unit: 'spans/s', target: '>= 500000' },
        { name: 'export messages to parquet', value: Math.round(rates.messages), unit: 'spans/s', target: '' },
        { name: 'export trajectories to parquet', value: Math.round(rates.trajectories), unit: 'spans/s', target: '' },
        {
          name: 'derive stored spans (idle-time work)',
          value: Math.round(spanCount / deriveSeconds),
          unit: 'spans/s',
          target: '',
        },
        { name: 'duckdb scan of the same columns', value: Math.round(scanRate), unit: 'spans/s', target: '' },
        {
          name: 'triplets export / scan',
          value: Number((rates.triplets / scanRate).toFixed(3)),
          unit: 'ratio',
          target: '>= 0.15',
        },
        {
          name: 'agl export start (a one-rollout store)',
          value: Number(startSeconds.toFixed(3)),
          unit: 's',
          target: '',
        },
        {
          name: 'triplets export less its start / scan',
          value: Number((scanSeconds / Math.max(tripletSeconds - startSeconds, 1e-3)).toFixed(3)),
          unit: 'ratio',
          target: '',
        },
      ];
    } finally {
      await removeDir(dir);
    }
  },
};
