import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { z } from 'zod';
import { APO_COMMAND } from '../algorithms/apo/index.js';
import type { AlgorithmCommand } from '../algorithms/shared/command.js';
import { GEPA_COMMAND } from '../algorithms/gepa/index.js';
import { GRPO_COMMAND } from '../algorithms/grpo/index.js';
import { SFT_COMMAND } from '../algorithms/sft/index.js';
import type { LlmResource, NamedResources, PromptTemplateResource } from '../api/types.js';
import { AgentModuleError } from '../runner/load-agent.js';
import { CommandError, parseCommandArgs, UsageError } from './args.js';
import { OptionsError } from '../algorithms/shared/options.js';
import {
  checkOptions,
  type Flag,
  flagsOf,
  flagUsage,
  flagValue,
  readConfigFile,
  type Origins,
  usageOf,
} from './train-config.js';
import { loadDataset } from './dataset.js';
import { EvaluatedAfter, type EvaluatedRun, formatEvaluatedRun } from './train-eval.js';
import { Trainer } from './trainer.js';

/** The algorithms `agl train` runs: a new one is one more entry (src/algorithms/shared/command.ts). */
const ALGORITHMS: Record<string, AlgorithmCommand> = {
  apo: APO_COMMAND,
  gepa: GEPA_COMMAND,
  sft: SFT_COMMAND,
  grpo: GRPO_COMMAND,
};

const RESOURCE = z.discriminatedUnion('resource_type', [
  z.strictObject({
    resource_type: z.enum(['llm', 'proxy_llm']),
    endpoint: z.string().min(1),
    model: z.string().min(1),
    api_key: z.string().nullable().default(null),
    sampling_parameters: z.record(z.string(), z.unknown()).default({}),
  }),
  z.strictObject({
    resource_type: z.literal('prompt_template'),
    template: z.string(),
    engine: z.enum(['f-string', 'jinja', 'poml']).default('f-string'),
  }),
]);

/** Options of every algorithm: what to train, on what, where, and the resources to start from. */
const COMMON = z.strictObject({
  agent: z.string().min(1).describe('the agent module: export default rollout(...)'),
  train: z.string().min(1).describe('training tasks: .jsonl, .json or .parquet'),
  val: z.string().min(1).optional().describe('validation tasks, same formats'),
  db: z.string().min(1).default('./agl.duckdb').describe('the DuckDB file'),
  runners: z.int().min(1).default(4).describe('rollouts run at once'),
  processes: z.boolean().default(false).describe('run agl serve and the runners as processes, not in this one'),
  port: z
    .int()
    .min(0)
    .max(65535)
    .default(0)
    .describe("the server's port on 127.0.0.1 (0: any free one); fix it for a trainer that pulls GRPO batches"),
  upstream: z.url().optional().describe('model server of the gateway, for resources with no llm'),
  maxStoreDowntime: z
    .number()
    .positive()
    .optional()
    .describe('seconds a runner waits for a store that is away before it stops (default: no limit)'),
  prompt: z.string().min(1).optional().describe('the prompt template to start from, e.g. "Answer: {question}"'),
  promptFile: z.string().min(1).optional().describe('the same, read from a file'),
  llmModel: z.string().min(1).optional().describe("the agent's model (its llm resource)"),
  llmEndpoint: z.url().optional().describe('its OpenAI-compatible endpoint (default: OPENAI_BASE_URL, else OpenAI)'),
  resources: z
    .record(z.string(), RESOURCE)
    .optional()
    .describe('named resources as the REST API takes them (config file only)'),
});

const COMMON_PATHS = ['agent', 'train', 'val', 'db', 'promptFile'];
const COMMON_FLAGS = flagsOf(COMMON, COMMON_PATHS);
const flagsOfCommand = (command: AlgorithmCommand) => flagsOf(command.options, command.paths, command.fileOnly);

export const TRAIN_USAGE = `agl train ${Object.keys(ALGORITHMS).join('|')} --agent MODULE --train FILE [--val FILE] [--config run.yaml|run.json] [options]
  Improves an agent: runs the algorithm with the store, a server and runners of the agent in
  this process, prints what it reports and leaves everything in the DuckDB file. Every option
  can also be a key of the config file (beamWidth, beam-width or beam_width); flags override it.
${Object.entries(ALGORITHMS)
  .map(([name, command]) => `  ${name}: ${command.summary}`)
  .join('\n')}
  Options of every algorithm:
${flagUsage(COMMON_FLAGS)}
${Object.entries(ALGORITHMS)
  .map(([name, command]) => `  ${name} options:\n${flagUsage(flagsOfCommand(command))}`)
  .join('\n')}`;

export async function train(args: string[]): Promise<void> {
  const [name] = args;
  const command = name === undefined ? undefined : ALGORITHMS[name];
  if (!command)
    throw new UsageError(
      `${name === undefined ? 'name the algorithm' : `unknown algorithm "${name}"`}: agl train ${Object.keys(ALGORITHMS).join('|')} ...`,
    );
  const { common, algorithm, origins, flags } = await trainOptions(name, command, args.slice(1));
  // Options the algorithm finds wrong, also once it has seen the data (a budget too small for
  // it), are named as the user wrote them.
  const usage = (error: unknown) =>
    error instanceof OptionsError ? usageOf(error, origins, flags, `train ${name}`) : undefined;
  const resources = await startResources(common);
  const log = (line: string) => console.error(line);
  let instance: ReturnType<AlgorithmCommand['create']>;
  try {
    instance = command.create(algorithm, { resources, log });
  } catch (error) {
    throw usage(error) ?? (error instanceof TypeError ? new UsageError(error.message) : error);
  }
  const evalTasks = await evaluationTasks(algorithm.eval);
  if (evalTasks && command.models)
    instance = new EvaluatedAfter(
      instance,
      evalTasks,
      command.models,
      algorithm.rolloutTimeoutSeconds as number | undefined,
      log,
    );
  const trainer = new Trainer({
    algorithm: instance,
    nRunners: common.runners,
    db: common.db,
    port: common.port,
    upstream: common.upstream,
    strategy: common.processes ? 'processes' : 'in-process',
    maxStoreDowntimeSeconds: common.maxStoreDowntime,
    progress: false,
  });
  let result: unknown;
  try {
    result = await trainer.fit(common.agent, { train: common.train, val: common.val ?? [] });
  } catch (error) {
    if (error instanceof AgentModuleError) throw new UsageError(error.message);
    // Datasets, resources and options the run found wanting, and the errors the algorithm
    // explains itself: their messages say what to change.
    const explained = usage(error);
    if (explained) throw explained;
    const message = error instanceof TypeError ? error.message : command.explain?.(error);
    throw message === undefined ? error : new CommandError(message);
  }
  process.stdout.write(
    instance instanceof EvaluatedAfter
      ? formatEvaluatedRun(result as EvaluatedRun<unknown>, (trained) => command.report(trained))
      : command.report(result),
  );
}

/** The tasks of `--eval FILE`, read before training starts so that a bad file costs no run. */
async function evaluationTasks(file: unknown): Promise<unknown[] | undefined> {
  if (file === undefined) return undefined;
  try {
    const tasks = await loadDataset(String(file));
    if (tasks.length === 0) throw new TypeError(`${String(file)} holds no tasks`);
    return tasks;
  } catch (error) {
    // The dataset's own messages start with the file's path.
    const message =
      (error as NodeJS.ErrnoException).code === 'ENOENT' ? `${String(file)}: no such file` : (error as Error).message;
    throw new UsageError(`--eval ${message}`);
  }
}

/**
 * The common and the algorithm's options, from the config file and the flags, checked as one
 * object (one message names every problem); with how the user set each, for later messages.
 */
async function trainOptions(
  name: string,
  command: AlgorithmCommand,
  args: string[],
): Promise<{
  common: z.output<typeof COMMON>;
  algorithm: Record<string, unknown>;
  origins: Origins;
  flags: Flag[];
}> {
  const flags = [...COMMON_FLAGS, ...flagsOfCommand(command)];
  const parsed = parseCommandArgs(args, {
    config: { type: 'string' },
    ...Object.fromEntries(
      flags.map((f) => [
        f.flag,
        { type: f.type === 'boolean' ? ('boolean' as const) : ('string' as const), multiple: f.type === 'strings' },
      ]),
    ),
  });
  if (parsed.positionals.length)
    throw new UsageError(`unexpected argument "${parsed.positionals[0]}"; options are flags, e.g. --rounds 3`);
  const values: Record<string, unknown> = {};
  const origins: Origins = new Map();
  const config = parsed.values.config as string | undefined;
  if (config !== undefined) {
    const keys = [...Object.keys(COMMON.shape), ...Object.keys(command.options.shape), 'algorithm'];
    const file = await readConfigFile(resolve(config), keys, new Set([...COMMON_PATHS, ...command.paths]));
    const { algorithm, ...options } = file.options;
    if (algorithm !== undefined && algorithm !== name)
      throw new UsageError(`${config} is for algorithm "${String(algorithm)}", not "${name}"`);
    for (const [key, value] of Object.entries(options)) {
      values[key] = value;
      origins.set(key, { name: file.names.get(key) ?? key, from: config });
    }
  }
  for (const flag of flags) {
    const given = (parsed.values as Record<string, string | boolean | string[] | undefined>)[flag.flag];
    if (given === undefined) continue;
    values[flag.key] = flagValue(flag, given);
    origins.set(flag.key, { name: `--${flag.flag}`, given });
  }
  for (const key of [...COMMON_PATHS, ...command.paths])
    if (typeof values[key] === 'string' && origins.get(key)?.from === undefined)
      values[key] = resolve(values[key] as string);
  const schema = z.strictObject({ ...COMMON.shape, ...command.options.shape });
  const checked: Record<string, unknown> = checkOptions(schema, values, origins, flags, name);
  const own = (keys: string[]) => Object.fromEntries(Object.entries(checked).filter(([key]) => keys.includes(key)));
  return {
    common: own(Object.keys(COMMON.shape)) as z.output<typeof COMMON>,
    algorithm: own(Object.keys(command.options.shape)),
    origins,
    flags,
  };
}

/** The resources to start from: the file's `resources`, with --prompt / --prompt-file and --llm-* set on them. */
async function startResources(options: z.output<typeof COMMON>): Promise<NamedResources | undefined> {
  const resources: NamedResources = { ...((options.resources ?? {}) as NamedResources) };
  if (options.prompt !== undefined && options.promptFile !== undefined)
    throw new UsageError('give --prompt or --prompt-file, not both');
  const template = options.promptFile === undefined ? options.prompt : await readPromptFile(options.promptFile);
  if (template !== undefined) {
    const name = nameOf(resources, ['prompt_template']) ?? 'prompt';
    const engine = (resources[name] as PromptTemplateResource | undefined)?.engine ?? 'f-string';
    resources[name] = { resource_type: 'prompt_template', template, engine };
  }
  if (options.llmModel !== undefined || options.llmEndpoint !== undefined) {
    const name = nameOf(resources, ['llm', 'proxy_llm']) ?? 'llm';
    const llm = resources[name] as LlmResource | undefined;
    const model = options.llmModel ?? llm?.model;
    if (model === undefined)
      throw new UsageError('--llm-endpoint needs --llm-model (or an llm resource in the config file)');
    resources[name] = {
      resource_type: llm?.resource_type ?? 'llm',
      endpoint: options.llmEndpoint ?? llm?.endpoint ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
      model,
      api_key: llm?.api_key ?? process.env.OPENAI_API_KEY ?? null,
      sampling_parameters: llm?.sampling_parameters ?? {},
    };
  }
  return Object.keys(resources).length ? resources : undefined;
}

async function readPromptFile(path: string): Promise<string> {
  try {
    return (await readFile(path, 'utf8')).replace(/\r?\n$/, '');
  } catch (error) {
    throw new UsageError(`--prompt-file ${path}: ${(error as Error).message}`);
  }
}

const nameOf = (resources: NamedResources, types: string[]) =>
  Object.keys(resources).find((name) => types.includes(resources[name].resource_type));
