import { readFile, writeFile } from 'node:fs/promises';
import { extname, resolve } from 'node:path';
import { z } from 'zod';
import { EVAL_OPTIONS, Evaluation, type EvalResult, formatEvalReport } from '../algorithms/eval/index.js';
import { OptionsError } from '../algorithms/shared/options.js';
import { QueryClient } from '../client/query-client.js';
import { StoreClient } from '../client/store-client.js';
import { AgentModuleError } from '../runner/load-agent.js';
import { CommandError, parseCommandArgs, UsageError } from './args.js';
import { loadDataset } from './dataset.js';
import { checkOptions, flagsOf, flagUsage, flagValue, type Origins, readConfigFile, usageOf } from './train-config.js';
import { Trainer } from './trainer.js';

/** `agl eval`'s own options besides the evaluation's (algorithms/eval/options.ts): where it runs and what it writes. */
const WHERE = z.strictObject({
  agent: z.string().min(1).optional().describe('the agent module (export default rollout(...)), run in this process'),
  tasks: z.string().min(1).describe('the tasks: .jsonl, .json or .parquet'),
  url: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe('a running agl server whose runners (agl runner, other processes) run the rollouts'),
  db: z.string().min(1).default('./agl.duckdb').describe('the DuckDB file (in process)'),
  runners: z.int().min(1).default(4).describe('rollouts run at once (in process)'),
  processes: z.boolean().default(false).describe('run agl serve and the runners as processes, not in this one'),
  port: z.int().min(0).max(65535).default(0).describe("the server's port on 127.0.0.1 (0: any free one)"),
  upstream: z.url().optional().describe('model server of the gateway, for resources with no llm'),
  maxStoreDowntime: z
    .number()
    .positive()
    .optional()
    .describe('seconds a runner waits for a store that is away before it stops (default: no limit)'),
  out: z.string().min(1).optional().describe('report file: .json or .md'),
});

const PATHS = ['agent', 'tasks', 'db', 'out'];
const SCHEMA = z.strictObject({ ...WHERE.shape, ...EVAL_OPTIONS.shape });
const FLAGS = flagsOf(SCHEMA.omit({ variants: true }), PATHS);

/** Flags that describe variants: each is given once (for every variant) or once per variant. */
const VARIANT_FLAGS = {
  name: 'name',
  resources: 'resources',
  prompt: 'prompt',
  'prompt-file': 'promptFile',
  'llm-model': 'llmModel',
  'llm-endpoint': 'llmEndpoint',
} as const;

export const EVAL_USAGE = `agl eval --agent MODULE|--url URL --tasks FILE <variants> [--samples K] [--config eval.yaml] [options]
  Runs every variant over every task K times, interleaved, and compares them: each variant's
  mean reward with a 95% interval (bootstrap over tasks), its success rate (Wilson interval)
  where rewards are 0/1, and each pair's paired difference with its interval and p-value. The
  run is stored (views evaluations, evaluation_tasks; docs/evaluation.md).
  Variants (repeat a flag once per variant; a flag given once applies to all):
    --name TEXT             the variant's name (default v1, v2 ...)
    --resources ID          a resources version: its id, latest, or best (of the latest APO run)
    --prompt TEXT           the prompt_template to run, over those resources
    --prompt-file FILE      the same, read from a file
    --llm-model TEXT        the llm resource's model
    --llm-endpoint URL      its OpenAI-compatible endpoint
  or a config file's variants: [{name, resources, prompt, llmModel, llmEndpoint}, ...].
  Options:
${flagUsage(FLAGS)}`;

export async function evaluate(args: string[]): Promise<void> {
  const { options, origins } = await evalOptions(args);
  if (options.agent !== undefined && options.url !== undefined)
    throw new UsageError(
      '--agent runs the agent in this process and --url uses the runners of a running server: give one',
    );
  if (options.agent === undefined && options.url === undefined)
    throw new UsageError(
      'eval needs --agent MODULE (run the agent here) or --url URL (a running server with its runners)',
    );
  const format = options.out === undefined ? undefined : reportFormat(options.out);
  let evaluation: Evaluation;
  try {
    evaluation = new Evaluation(
      {
        variants: options.variants,
        samples: options.samples,
        seed: options.seed,
        rolloutTimeoutSeconds: options.rolloutTimeoutSeconds,
        maxRollouts: options.maxRollouts,
      },
      (line) => console.error(line),
    );
  } catch (error) {
    throw error instanceof OptionsError
      ? usageOf(error, origins, FLAGS, 'eval')
      : error instanceof TypeError
        ? new UsageError(error.message)
        : error;
  }
  let result: EvalResult;
  try {
    result = options.url === undefined ? await inProcess(evaluation, options) : await onServer(evaluation, options);
  } catch (error) {
    if (error instanceof AgentModuleError) throw new UsageError(error.message);
    if (error instanceof OptionsError) throw usageOf(error, origins, FLAGS, 'eval');
    throw error instanceof TypeError ? new CommandError(error.message) : error;
  }
  process.stdout.write(formatEvalReport(result));
  if (options.out !== undefined && format !== undefined) {
    await writeFile(
      options.out,
      format === 'json' ? `${JSON.stringify(result, null, 2)}\n` : formatEvalReport(result, 'md'),
    );
    process.stdout.write(`report written to ${options.out}\n`);
  }
}

type EvalCommandOptions = z.output<typeof SCHEMA>;

function inProcess(evaluation: Evaluation, options: EvalCommandOptions): Promise<EvalResult> {
  return new Trainer({
    algorithm: evaluation,
    nRunners: options.runners,
    db: options.db,
    port: options.port,
    upstream: options.upstream,
    strategy: options.processes ? 'processes' : 'in-process',
    maxStoreDowntimeSeconds: options.maxStoreDowntime,
    progress: false,
  }).fit(options.agent as string, { train: options.tasks });
}

/** Against a running server: its runners take the rollouts; Ctrl-C stops waiting for them. */
async function onServer(evaluation: Evaluation, options: EvalCommandOptions): Promise<EvalResult> {
  const url = options.url as string;
  const token = process.env.AGL_TOKEN || undefined;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  try {
    return await evaluation.run({
      store: new StoreClient(url, { token }),
      source: new QueryClient(url, { token }),
      serverUrl: url,
      train: await loadDataset(options.tasks),
      val: [],
      signal: stop.signal,
    });
  } finally {
    process.off('SIGINT', onSignal);
  }
}

function reportFormat(path: string): 'json' | 'md' {
  const ext = extname(path).toLowerCase();
  if (ext === '.json') return 'json';
  if (ext === '.md') return 'md';
  throw new UsageError(`--out ${path}: the report is .json or .md`);
}

/** The options from the config file and the flags, the variant flags made into variants, checked as one object. */
async function evalOptions(args: string[]): Promise<{ options: EvalCommandOptions; origins: Origins }> {
  const parsed = parseCommandArgs(args, {
    config: { type: 'string' },
    ...Object.fromEntries(
      FLAGS.map((f) => [f.flag, { type: f.type === 'boolean' ? ('boolean' as const) : ('string' as const) }]),
    ),
    ...Object.fromEntries(
      Object.keys(VARIANT_FLAGS).map((flag) => [flag, { type: 'string' as const, multiple: true }]),
    ),
  });
  if (parsed.positionals.length)
    throw new UsageError(`unexpected argument "${parsed.positionals[0]}"; options are flags, e.g. --samples 3`);
  const values: Record<string, unknown> = {};
  const origins: Origins = new Map();
  const config = parsed.values.config as string | undefined;
  if (config !== undefined) {
    const file = await readConfigFile(resolve(config), Object.keys(SCHEMA.shape), new Set(PATHS));
    for (const [key, value] of Object.entries(file.options)) {
      values[key] = value;
      origins.set(key, { name: file.names.get(key) ?? key, from: config });
    }
  }
  const given = parsed.values as Record<string, string | boolean | string[] | undefined>;
  for (const flag of FLAGS) {
    const value = given[flag.flag] as string | boolean | undefined;
    if (value === undefined) continue;
    values[flag.key] = flagValue(flag, value);
    origins.set(flag.key, { name: `--${flag.flag}`, given: value });
  }
  for (const key of PATHS)
    if (typeof values[key] === 'string' && origins.get(key)?.from === undefined)
      values[key] = resolve(values[key] as string);
  const variants = await variantsOf(given);
  if (variants) {
    values.variants = variants;
    origins.set('variants', { name: 'the variant flags' });
  }
  if (values.variants === undefined)
    throw new UsageError('eval needs variants: --prompt, --resources, --llm-model ... (or variants in --config)');
  return { options: checkOptions(SCHEMA, values, origins, FLAGS, 'eval'), origins };
}

/** The variants the variant flags describe, or undefined when none is given. */
async function variantsOf(given: Record<string, unknown>): Promise<Record<string, unknown>[] | undefined> {
  const lists = Object.entries(VARIANT_FLAGS)
    .map(([flag, key]) => ({ flag, key, values: given[flag] as string[] | undefined }))
    .filter(
      (entry): entry is { flag: string; key: (typeof VARIANT_FLAGS)[keyof typeof VARIANT_FLAGS]; values: string[] } =>
        entry.values !== undefined,
    );
  if (lists.length === 0) return undefined;
  const count = Math.max(...lists.map((l) => l.values.length));
  const uneven = lists.find((l) => l.values.length !== 1 && l.values.length !== count);
  if (uneven)
    throw new UsageError(
      `--${uneven.flag} is given ${uneven.values.length} times for ${count} variants: give a variant flag once (for all) or once per variant`,
    );
  if (given.prompt !== undefined && given['prompt-file'] !== undefined)
    throw new UsageError('give --prompt or --prompt-file, not both');
  const variants: Record<string, unknown>[] = [];
  for (let i = 0; i < count; i++) {
    const variant: Record<string, unknown> = { name: `v${i + 1}` };
    for (const { key, values } of lists) {
      const value = values.length === 1 ? values[0] : values[i];
      if (key === 'promptFile') variant.prompt = await readPromptFile(value);
      else variant[key] = value;
    }
    variants.push(variant);
  }
  return variants;
}

async function readPromptFile(path: string): Promise<string> {
  try {
    return (await readFile(path, 'utf8')).replace(/\r?\n$/, '');
  } catch (error) {
    throw new UsageError(`--prompt-file ${path}: ${(error as Error).message}`);
  }
}
