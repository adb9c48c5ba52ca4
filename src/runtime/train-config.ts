import { readFile } from 'node:fs/promises';
import { dirname, extname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import { OptionsError, parseOptions, type Speller, type Spelling } from '../algorithms/shared/options.js';
import { UsageError } from './args.js';

/**
 * Options of `agl train` from a config file and from flags, checked with the zod schemas that
 * describe them: the schema's keys are the file's keys (as in TypeScript, beamWidth; beam-width
 * and beam_width are read too) and, for strings, numbers and booleans, the flags (--beam-width).
 */

/** `strings`: a list of texts, the flag given once per item. */
type FlagType = 'string' | 'number' | 'boolean' | 'strings';

export interface Flag {
  readonly key: string;
  readonly flag: string;
  readonly type: FlagType;
  /** How usage names its value: N, TEXT, URL, FILE, DIR, or an enum's choices (jsonl|parquet). */
  readonly value: string;
  readonly description: string;
  readonly defaultValue: unknown;
}

/**
 * The flags of a schema's keys that are strings (an enum of strings too), numbers or booleans;
 * the others, and those in `fileOnly` (secrets: a command line is visible to every user of the
 * machine), are for files only.
 */
export function flagsOf(schema: z.ZodObject, paths: readonly string[] = [], fileOnly: readonly string[] = []): Flag[] {
  const flags: Flag[] = [];
  for (const [key, field] of Object.entries(schema.shape) as [string, z.ZodType][]) {
    let inner = field;
    let defaultValue: unknown;
    while (inner.def.type === 'default' || inner.def.type === 'optional') {
      const def = inner.def as unknown as { defaultValue?: unknown; innerType: z.ZodType };
      if (inner.def.type === 'default') defaultValue = def.defaultValue;
      inner = def.innerType;
    }
    const choices = enumChoices(inner);
    const type = choices ? 'string' : isStringList(inner) ? 'strings' : inner.def.type;
    if ((type !== 'string' && type !== 'number' && type !== 'boolean' && type !== 'strings') || fileOnly.includes(key))
      continue;
    const format = (inner.def as unknown as { format?: string }).format;
    const value = choices?.join('|') ?? valueName(key, type, format, paths);
    flags.push({ key, flag: kebab(key), type, value, description: field.description ?? '', defaultValue });
  }
  return flags;
}

/** How usage names a flag's value: N, a path's FILE or DIR (outDir), URL or TEXT. */
function valueName(key: string, type: FlagType, format: string | undefined, paths: readonly string[]): string {
  if (type === 'number') return 'N';
  if (paths.includes(key)) return key.endsWith('Dir') ? 'DIR' : 'FILE';
  return format === 'url' ? 'URL' : 'TEXT';
}

function isStringList(schema: z.ZodType): boolean {
  return schema.def.type === 'array' && (schema.def as unknown as { element: z.ZodType }).element.def.type === 'string';
}

/** The values of a z.enum of strings (a flag takes them as text), or undefined for any other type. */
function enumChoices(schema: z.ZodType): string[] | undefined {
  if (schema.def.type !== 'enum') return undefined;
  const values = Object.values((schema.def as unknown as { entries: Record<string, unknown> }).entries);
  return values.every((value): value is string => typeof value === 'string') ? values : undefined;
}

/** Usage lines for flags: `--beam-width N  what it is (default 4)`. */
export function flagUsage(flags: readonly Flag[]): string {
  const names = flags.map((f) =>
    f.type === 'boolean'
      ? `--${f.defaultValue === true ? '[no-]' : ''}${f.flag}`
      : `--${f.flag} ${f.value}${f.type === 'strings' ? ' (repeatable)' : ''}`,
  );
  const width = Math.max(...names.map((n) => n.length));
  return flags
    .map((f, i) => {
      const fallback = f.defaultValue === undefined || f.defaultValue === false ? '' : ` (default ${f.defaultValue})`;
      return `    ${names[i].padEnd(width)}  ${f.description}${fallback}`;
    })
    .join('\n');
}

/** A flag's text as its key's value: numbers as numbers (zod then names a bad one). */
export function flagValue(flag: Flag, value: string | boolean | string[]): unknown {
  if (flag.type !== 'number' || typeof value !== 'string') return value;
  const n = Number(value);
  return value.trim() === '' || Number.isNaN(n) ? value : n;
}

/**
 * A config file's options: a JSON or YAML object, its keys spelled as `keys` spell them (an
 * unknown key is kept as it is, for the check to name), file paths made absolute; `names` has
 * each key as the file wrote it (beam_width), for error messages.
 */
export async function readConfigFile(
  path: string,
  keys: readonly string[],
  pathKeys: ReadonlySet<string>,
  flag = '--config',
): Promise<{ options: Record<string, unknown>; names: Map<string, string> }> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new UsageError(
      `${flag} ${path}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message}`,
    );
  }
  let parsed: unknown;
  try {
    parsed = ['.yaml', '.yml'].includes(extname(path).toLowerCase()) ? parseYaml(text) : JSON.parse(text);
  } catch (error) {
    throw new UsageError(
      `${path} is not valid ${extname(path).toLowerCase() === '.json' ? 'JSON' : 'YAML'}: ${(error as Error).message.split('\n')[0]}`,
    );
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new UsageError(`${path} must hold an object of options (key: value)`);
  const known = new Map(keys.map((key) => [squash(key), key]));
  const options: Record<string, unknown> = {};
  const names = new Map<string, string>();
  for (const [written, value] of Object.entries(parsed)) {
    const key = known.get(squash(written)) ?? written;
    options[key] = pathKeys.has(key) && typeof value === 'string' ? resolve(dirname(path), value) : value;
    names.set(key, written);
  }
  return { options, names };
}

/** How the user set each option, for error messages: a flag and its text, or a config file's key. */
export type Origins = Map<string, Spelling>;

/**
 * `values` of `agl train <algorithm>` checked by `schema`; a problem is a UsageError of one line
 * naming each option as the user wrote it.
 */
export function checkOptions<S extends z.ZodObject>(
  schema: S,
  values: Record<string, unknown>,
  origins: Origins,
  flags: readonly Flag[],
  algorithm: string,
): z.output<S> {
  try {
    return parseOptions(schema, values, algorithm);
  } catch (error) {
    throw error instanceof OptionsError ? usageOf(error, origins, flags, `train ${algorithm}`) : error;
  }
}

/**
 * An OptionsError as `agl train` says it: options left out as what the command needs
 * (`train apo needs --agent MODULE (...)`), any other problem with the option named as the user
 * wrote it (--beam-width, beam_width (from run.yaml)), and by its flag where the user did not.
 */
export function usageOf(error: OptionsError, origins: Origins, flags: readonly Flag[], command: string): UsageError {
  const flagOf = (key: string) => flags.find((flag) => flag.key === key);
  const missing = error.problems.map((problem) => (problem.missing ? flagOf(problem.key) : undefined));
  if (missing.length > 0 && missing.every((flag) => flag !== undefined))
    return new UsageError(
      `${command} needs ${missing.map((flag) => `--${flag.flag} ${flag.value} (${flag.description})`).join(' and ')}`,
    );
  const spell: Speller = (key) => {
    const flag = flagOf(key);
    return origins.get(key) ?? (flag && { name: `--${flag.flag}` });
  };
  return new UsageError(error.describe(spell));
}

/** beamWidth -> beam-width, baseURL -> base-url. */
const kebab = (key: string) =>
  key
    .replace(/([a-z0-9])([A-Z])/g, '$1-$2')
    .replace(/([A-Z])([A-Z][a-z])/g, '$1-$2')
    .toLowerCase();

/** A key without case and separators: beam-width, beam_width and beamWidth are one key. */
const squash = (key: string) => key.replace(/[-_]/g, '').toLowerCase();
