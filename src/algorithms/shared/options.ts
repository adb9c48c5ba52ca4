import { z } from 'zod';

/**
 * The one way algorithms check their options: a zod schema per algorithm, parsed here, and every
 * problem worded the same way on one line, naming the option. The TypeScript API names options
 * by their keys (beamWidth); `agl train` gives a `Speller` so that the same problems name the flag
 * or the config file's key the user wrote (--beam-width, beam_width (from run.yaml)).
 */

/** How the user wrote an option: its name, the file that set it, and its value as given (a flag's text). */
export interface Spelling {
  readonly name: string;
  readonly from?: string;
  readonly given?: unknown;
}

/** The spelling of an option key; undefined: the key itself, with the value the parser got. */
export type Speller = (key: string) => Spelling | undefined;

/** One thing wrong with an option. */
export interface OptionProblem {
  /** The option's key; for a nested option, the key it is under (`path` goes on from it). */
  readonly key: string;
  readonly path?: readonly PropertyKey[];
  /** Left out, with no default. */
  readonly missing?: boolean;
  /** The problem as words, the option named as the user wrote it. */
  words(option: Spelling): string;
}

/** Options that cannot run, a TypeError as the API's other argument errors; `describe` words it for a speller. */
export class OptionsError extends TypeError {
  constructor(
    readonly heading: string | undefined,
    readonly problems: readonly OptionProblem[],
    readonly values: Readonly<Record<string, unknown>>,
  ) {
    super('');
    this.name = 'OptionsError';
    this.message = this.describe();
  }

  /** One line: the heading, then each problem, separated by semicolons. */
  describe(spell: Speller = () => undefined): string {
    const lines = this.problems.map((problem) => problem.words(this.spelling(problem, spell)));
    return `${this.heading === undefined ? '' : `${this.heading}: `}${lines.join('; ')}`;
  }

  private spelling(problem: OptionProblem, spell: Speller): Spelling {
    const path = problem.path ?? [];
    const spelled = spell(problem.key);
    let given = spelled && 'given' in spelled ? spelled.given : this.values[problem.key];
    for (const step of path) given = (given as Record<PropertyKey, unknown> | undefined)?.[step];
    const name = [spelled?.name ?? problem.key, ...path.map(String)].join('.');
    return { name, from: spelled?.from, given };
  }
}

/** `name (from run.yaml)`: an option as the user wrote it, with the file that set it. */
export const named = (option: Spelling) => `${option.name}${option.from === undefined ? '' : ` (from ${option.from})`}`;

/** `input` checked by `schema`, defaults filled in; an OptionsError names every option that is wrong. */
export function parseOptions<S extends z.ZodObject>(schema: S, input: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  const values = input !== null && typeof input === 'object' ? (input as Record<string, unknown>) : {};
  throw new OptionsError(
    `invalid ${what} options`,
    parsed.error.issues.flatMap((issue) => problemsOf(schema, values, issue)),
    values,
  );
}

function problemsOf(schema: z.ZodObject, values: Record<string, unknown>, issue: z.core.$ZodIssue): OptionProblem[] {
  if (issue.code === 'unrecognized_keys') {
    return issue.keys.map((unknown) => {
      const [key, ...path] = [...issue.path, unknown];
      return { key: String(key), path, words: (option) => `unknown option ${named(option)}` };
    });
  }
  const [key, ...path] = issue.path;
  const field = path.length === 0 ? unwrap(schema.shape[String(key)] as z.ZodType | undefined) : undefined;
  let value: unknown = values;
  for (const step of issue.path) value = (value as Record<PropertyKey, unknown> | undefined)?.[step];
  const missing = issue.code === 'invalid_type' && value === undefined;
  const wrong = missing ? 'is missing' : `must be ${expectation(issue, field)}`;
  return [
    {
      key: String(key),
      path,
      missing,
      words: (option) => `${named(option)} ${wrong}${missing ? '' : ` (given ${JSON.stringify(option.given)})`}`,
    },
  ];
}

/** What a value must be, in words: an integer >= 1, one of jsonl|parquet, a URL ... */
function expectation(issue: z.core.$ZodIssue, field: z.ZodType | undefined): string {
  const kind = (field as { isInt?: boolean } | undefined)?.isInt ? 'an integer' : 'a number';
  switch (issue.code) {
    case 'invalid_type':
      if (issue.expected === 'int') return 'an integer';
      return issue.expected === 'number' ? kind : (TYPES[issue.expected] ?? `of type ${issue.expected}`);
    case 'too_small':
      if (issue.origin === 'string')
        return Number(issue.minimum) <= 1 ? 'text that is not empty' : `at least ${issue.minimum} characters`;
      if (issue.origin === 'number') return `${kind} ${issue.inclusive ? '>=' : '>'} ${issue.minimum}`;
      return `at least ${issue.minimum} items`;
    case 'too_big':
      if (issue.origin === 'number') return `${kind} ${issue.inclusive ? '<=' : '<'} ${issue.maximum}`;
      return `at most ${issue.maximum} ${issue.origin === 'string' ? 'characters' : 'items'}`;
    case 'invalid_value':
      return `one of ${issue.values.map(String).join('|')}`;
    case 'invalid_format':
      return issue.format === 'url' ? 'a URL' : `a ${issue.format}`;
    default:
      return issue.message;
  }
}

const TYPES: Record<string, string> = {
  string: 'text',
  boolean: 'true or false',
  object: 'an object of key: value',
  record: 'an object of key: value',
  array: 'a list',
};

/** The schema under .default() and .optional(). */
function unwrap(field: z.ZodType | undefined): z.ZodType | undefined {
  let inner = field;
  while (inner && (inner.def.type === 'default' || inner.def.type === 'optional'))
    inner = (inner.def as unknown as { innerType: z.ZodType }).innerType;
  return inner;
}

/**
 * The model an algorithm starts from when the store's latest resources do not say (SFT and
 * GRPO): the `llm` resource's fields, as an option.
 */
export const START_MODEL = z.strictObject({
  endpoint: z.url().describe('OpenAI-compatible base URL of the starting model, with its /v1'),
  model: z.string().min(1).describe('the starting model name'),
  apiKey: z.string().nullable().default(null).describe('API key sent to the endpoint (default none)'),
  samplingParameters: z
    .record(z.string(), z.unknown())
    .default({})
    .describe('request defaults the gateway adds to every call (temperature ...)'),
});

/**
 * `agl train sft|grpo --eval FILE`: after training, the first and the last model run the tasks of
 * FILE and are compared as `agl eval` compares variants (src/runtime/train-eval.ts).
 */
export const EVAL_TASKS = z
  .string()
  .min(1)
  .optional()
  .describe(
    'tasks (.jsonl, .json, .parquet) to evaluate the first and the last model on when training ends, stored and reported as agl eval does (agl train)',
  );

/** How a prompt search's option descriptions name its models (APO: "critic and editor"). */
export interface SearchWords {
  /** The algorithm, as in "continue the latest APO run". */
  readonly name: string;
  /** Its models, as in "sampling temperature of critic and editor". */
  readonly models: string;
  /** "their API key" or "its API key". */
  readonly possessive: 'their' | 'its';
  /** One call, as in "one critic or editor call". */
  readonly call: string;
  /** Whose tokens the budget counts, as in "critic and editor tokens in all". */
  readonly tokens: string;
}

/**
 * The options the prompt searches (APO, GEPA) share: their models' endpoint, sampling and
 * retries, their budgets, and resuming. Each schema spreads them among its own.
 */
export function searchOptions(words: SearchWords) {
  return {
    modelApi: z
      .enum(['openai', 'anthropic'])
      .default('openai')
      .describe(`the API of ${words.models}: OpenAI's chat completions or Anthropic's Messages`),
    baseURL: z
      .url({ protocol: /^https?$/ })
      .optional()
      .describe(
        `endpoint of ${words.models} (default: OPENAI_BASE_URL, else OpenAI; with modelApi anthropic, ANTHROPIC_BASE_URL, else Anthropic)`,
      ),
    apiKey: z
      .string()
      .optional()
      .describe(
        `${words.possessive} API key (default: OPENAI_API_KEY, or ANTHROPIC_API_KEY); config file only, never a flag`,
      ),
    temperature: z.number().min(0).max(2).default(1).describe(`sampling temperature of ${words.models}`),
    seed: z
      .int()
      .default(0)
      .describe('seed of every random choice: the same seed, data and answers give the same search'),
    maxRollouts: z
      .int()
      .min(1)
      .optional()
      .describe('budget: rollouts in all; the search ends before an evaluation that would pass it'),
    maxTokens: z
      .int()
      .min(1)
      .optional()
      .describe(`budget: ${words.tokens} tokens in all; no call starts once it is spent`),
    rolloutTimeoutSeconds: z.number().positive().default(600).describe('a rollout running longer fails (scored 0)'),
    requestTimeoutSeconds: z.number().positive().default(120).describe(`one ${words.call} call`),
    retries: z.int().min(0).default(3).describe(`retries of a failed ${words.call} call, with backoff`),
    retryBackoffSeconds: z.number().min(0).default(1).describe('the first wait before a retry; it doubles'),
    resume: z.boolean().default(false).describe(`continue the latest ${words.name} run in the store`),
    resumeRun: z.string().min(1).optional().describe(`continue this ${words.name} run (its rollout id)`),
  };
}

/** A prompt search's options, checked, with defaults; its models' endpoint from the environment when not given. */
export function parseSearchOptions<S extends z.ZodObject>(
  schema: S,
  input: unknown,
  what: string,
): z.output<S> & { baseURL: string; apiKey?: string } {
  const settings = parseOptions(schema, input, what) as z.output<S> & {
    modelApi: 'openai' | 'anthropic';
    baseURL?: string;
    apiKey?: string;
  };
  const anthropic = settings.modelApi === 'anthropic';
  return {
    ...settings,
    baseURL:
      settings.baseURL ??
      (anthropic
        ? (process.env.ANTHROPIC_BASE_URL ?? 'https://api.anthropic.com')
        : (process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1')),
    apiKey: settings.apiKey ?? (anthropic ? process.env.ANTHROPIC_API_KEY : process.env.OPENAI_API_KEY),
  };
}
