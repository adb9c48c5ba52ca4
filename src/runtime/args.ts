import { parseArgs, type ParseArgsConfig } from 'node:util';

/** A command line that cannot be run; the message says what to change. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A condition the user can fix (a busy port, a locked file): printed without a stack, exit 1. */
export class CommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CommandError';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

export function parseCommandArgs<O extends Options>(args: string[], options: O) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

/** A port from 0 to 65535; undefined when not given. */
export function portArg(value: string | undefined, flag = '--port'): number | undefined {
  if (value === undefined) return undefined;
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new UsageError(`${flag} must be an integer from 0 to 65535, not "${value}"`);
  return port;
}

const UNITS: Record<string, number> = {
  '': 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
};

/** A size in bytes ("64MiB", "512k", "1048576"); undefined when not given. */
export function bytesArg(name: string, value: string): number;
export function bytesArg(name: string, value: string | undefined): number | undefined;
export function bytesArg(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(value.trim());
  const unit = match ? UNITS[match[2].toLowerCase()] : undefined;
  if (!match || unit === undefined || Number(match[1]) <= 0) {
    throw new UsageError(`${name} must be a size such as 64MiB, 512KiB or a byte count, not "${value}"`);
  }
  return Math.floor(Number(match[1]) * unit);
}

export function choiceArg<T extends string>(
  name: string,
  value: string | undefined,
  choices: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (!(choices as readonly string[]).includes(value))
    throw new UsageError(`${name} must be one of ${choices.join(', ')}, not "${value}"`);
  return value as T;
}

/** A count of 0 or more; undefined when not given. */
export function countArg(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`${name} must be a whole number, 0 or more, not "${value}"`);
  return n;
}

/** A positive number of seconds; undefined when not given. */
export function secondsArg(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0)
    throw new UsageError(`${name} must be a number of seconds above 0, not "${value}"`);
  return n;
}

/** An http(s) URL; undefined when not given. */
export function urlArg(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`${name} must be a URL such as http://127.0.0.1:8000/v1, not "${value}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`${name} must be an http or https URL, not "${value}"`);
  return value;
}
