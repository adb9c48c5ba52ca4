import { join } from 'node:path';
import { computeAdvantages } from '../src/algorithms/grpo/advantages.js';
import { arrowStream } from '../src/algorithms/grpo/arrow.js';
import { buildRows, type BuildSettings, type StepRollout } from '../src/algorithms/grpo/batch.js';
import type { QuerySource } from '../src/adapters/source.js';
import { spanRows, type SpanInput } from '../src/store/span-json.js';
import { DuckDBStore } from '../src/store/store.js';
import { TOKEN_CALLS_SQL } from '../src/sql/views.js';
import { newTempDir, removeDir } from '../test/support/helpers.js';
import { benchSpan } from './adapters.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

// One GRPO batch: 1,024 rollouts (128 groups of 8), each 8 turns of an agent whose next prompt
// is its conversation so far plus a tool result, so that each merges into one trajectory row of
// about 2,000 tokens (a prompt of 200, then 8 answers of 200 and 7 tool results of 25).
const ROLLOUTS = 1024;
const GROUP = 8;
const TURNS = 8;
const PROMPT = 200;
const ANSWER = 200;
const TOOL = 25;

/** Token ids that look like a tokenizer's (up to 150,000), the same every run. */
function tokens(seed: number, count: number): number[] {
  const ids: number[] = [];
  let x = seed * 2654435761;
  for (let i = 0; i < count; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    ids.push(x % 150_000);
  }
  return ids;
}

/** One rollout: 8 LLM calls as a vLLM server answers them (token ids, logprobs), then its reward. */
function rolloutSpans(r: number): SpanInput[] {
  const span = (id: number, name: string, at: number, attributes: Record<string, unknown>) =>
    benchSpan(r, `at-${r}`, r * 16 + id, name, at, attributes);
  const spans: SpanInput[] = [];
  let prompt = tokens(r, PROMPT);
  for (let turn = 0; turn < TURNS; turn++) {
    const answer = tokens(r * 100 + turn + 1, ANSWER);
    const request = { model: 'bench', messages: [{ role: 'user', content: `task ${r} turn ${turn}` }] };
    const response = {
      id: `resp-${r}-${turn}`,
      model: 'bench',
      prompt_token_ids: prompt,
      usage: { prompt_tokens: prompt.length, completion_tokens: ANSWER },
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: `answer ${turn} of task ${r}` },
          finish_reason: 'stop',
          token_ids: answer,
          logprobs: { content: answer.map((_, i) => ({ token: 't', logprob: -(i % 7) / 8 })) },
        },
      ],
    };
    spans.push(
      span(turn + 1, 'chat bench', turn * 10, {
        'agl.llm.api': 'chat',
        'agl.llm.request': JSON.stringify(request),
        'agl.llm.response': JSON.stringify(response),
      }),
    );
    prompt = [...prompt, ...answer, ...tokens(r * 1000 + turn, TOOL)];
  }
  spans.push(
    span(15, 'agentlightning.annotation', 99, {
      'agentlightning.reward.0.name': 'primary',
      'agentlightning.reward.0.value': (r % 3) / 2,
    }),
  );
  return spans;
}

const SETTINGS: BuildSettings = {
  aggregation: 'trajectory',
  credit: 'final',
  gamma: 1,
  overlong: 'drop',
  oldestVersionIndex: 0,
};

const stepRollouts = (count: number): StepRollout[] =>
  Array.from({ length: count }, (_, r) => ({
    rolloutId: `ro-${r}`,
    attemptId: `at-${r}`,
    status: 'succeeded',
    groupId: `g-${Math.floor(r / GROUP)}`,
    modelVersion: '0',
    versionIndex: 0,
  }));

type Timed<T> = { wall: number; cpu: number; value: T };

/** Wall and CPU seconds (the process's, DuckDB's threads included) of `work`. */
async function timed<T>(work: () => Promise<T>): Promise<Timed<T>> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  const value = await work();
  const used = process.cpuUsage(cpu);
  return { wall: (performance.now() - start) / 1000, cpu: (used.user + used.system) / 1e6, value };
}

/** What GRPO does between the rollouts and the hand-off: rows, checks, advantages, the Arrow stream. */
async function buildBatch(
  store: DuckDBStore,
  rollouts: readonly StepRollout[],
): Promise<{ rows: number; tokens: number; bytes: number }> {
  const source: QuerySource = { stream: (sql, options) => store.streamQuery(sql, { ...options, guard: false }) };
  const built = await buildRows(source, rollouts, SETTINGS);
  const advantages = computeAdvantages(built.rows, { estimator: 'grpo', epsilon: 1e-6, rolloutLevel: false });
  const body = arrowStream({
    batchId: 'batch-bench',
    step: 1,
    modelVersion: '0',
    estimator: 'grpo',
    aggregation: 'trajectory',
    rows: built.rows,
    advantages: advantages.values,
    settings: { steps: 1, batchSize: rollouts.length / GROUP, groupSize: GROUP },
  });
  const tokens = built.rows.reduce((sum, row) => sum + row.promptIds.length + row.responseIds.length, 0);
  return { rows: built.rows.length, tokens, bytes: body.byteLength };
}

/** DuckDB reading the same calls' token columns into JS, as the batch builder gets them. */
async function readCalls(store: DuckDBStore, rollouts: readonly StepRollout[]): Promise<number> {
  const ids = rollouts.map((r) => `'${r.rolloutId}'`).join(', ');
  let calls = 0;
  for await (const batch of store.streamQuery(
    `SELECT rollout_id, attempt_id, prompt_token_ids, response_token_ids, response_logprobs FROM ${TOKEN_CALLS_SQL} c WHERE rollout_id IN (${ids})`,
    { guard: false },
  ))
    calls += batch.length;
  if (calls !== rollouts.length * TURNS) throw new Error(`read ${calls} calls, not ${rollouts.length * TURNS}`);
  return calls;
}

/** `n` runs of `work`, the fastest first. */
async function runsOf<T>(n: number, work: () => Promise<T>): Promise<Timed<T>[]> {
  const runs: Timed<T>[] = [];
  for (let i = 0; i < n; i++) runs.push(await timed(work));
  return runs.sort((a, b) => a.wall - b.wall);
}

/**
 * The fastest of `n` runs of `work`: the machine is shared, and the other runs' extra time is
 * other processes' (and the first run's, cold caches and unoptimized code).
 */
async function fastest<T>(n: number, work: () => Promise<T>): Promise<Timed<T>> {
  return (await runsOf(n, work))[0];
}

export const grpo: Benchmark = {
  name: 'grpo',
  description: `one GRPO batch: ${ROLLOUTS} trajectory rows (${TURNS} turns, ~2,000 tokens each) from the store to Arrow IPC`,
  async run(size: Size): Promise<Figure[]> {
    const [rollouts, runs] = sized(size, [stepRollouts(ROLLOUTS), 5], [stepRollouts(2 * GROUP), 1]);
    const dir = await newTempDir();
    try {
      // The deriver is left to this benchmark: first the batch of spans nothing parsed yet.
      const store = await DuckDBStore.open({ path: join(dir, 'grpo-bench.duckdb'), deriveWhenIdleMs: Infinity });
      for (let r = 0; r < rollouts.length; r += 64) {
        const spans: SpanInput[] = [];
        for (let i = r; i < Math.min(rollouts.length, r + 64); i++) spans.push(...rolloutSpans(i));
        await store.writeSpans(spanRows(...spans), 0);
      }
      // A batch only reads: the one over spans not derived yet runs as often as the other. The
      // first run of the process is reported apart: it also pays for code not optimized yet,
      // which a training run pays at its first step only (each later step's spans wait too).
      const first = await timed(() => buildBatch(store, rollouts));
      const freshRuns = await runsOf(runs, () => buildBatch(store, rollouts));
      const fresh = freshRuns[0];
      const derive = await timed(() => store.deriveAll());
      const build = await fastest(runs, () => buildBatch(store, rollouts));
      const read = await fastest(runs, () => readCalls(store, rollouts));
      await store.close();
      const { rows, tokens, bytes } = build.value;
      console.error(
        `  ${rows} rows, ${tokens} tokens, ${(bytes / 2 ** 20).toFixed(1)} MiB of Arrow; CPU seconds (DuckDB's threads too): batch ${build.cpu.toFixed(2)}, read ${read.cpu.toFixed(2)}; spans not derived yet: fastest ${fresh.wall.toFixed(2)} s (${fresh.cpu.toFixed(1)} CPU), median ${freshRuns[Math.floor(freshRuns.length / 2)].wall.toFixed(2)} s, first ${first.wall.toFixed(2)} s; the deriver on them: ${derive.wall.toFixed(1)} s (${derive.cpu.toFixed(1)} CPU)`,
      );
      const figure = (name: string, value: number, unit: string, target = ''): Figure => ({
        name,
        value: Number(value.toFixed(unit === 'ratio' ? 2 : 3)),
        unit,
        target,
      });
      return [
        figure('grpo batch of 1,024 trajectory rows to Arrow', build.wall, 's', '< 2'),
        figure('duckdb reading those calls into JS', read.wall, 's'),
        figure('grpo batch / duckdb read', build.wall / read.wall, 'ratio', '< 3'),
        figure('grpo batch / duckdb read, CPU seconds', build.cpu / read.cpu, 'ratio'),
        figure('grpo batch, spans not derived yet', fresh.wall, 's', '< 2'),
        figure("grpo batch, spans not derived yet, the process's first", first.wall, 's'),
        figure('grpo batch, spans not derived yet / derived', fresh.wall / build.wall, 'ratio'),
        figure('deriver on those spans (idle-time work, once)', derive.wall, 's'),
      ];
    } finally {
      await removeDir(dir);
    }
  },
};
