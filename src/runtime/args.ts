import { parseArgs, type ParseArgsConfig } from 'node:util';

/** A command line that cannot be run; the message says what to change. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A flag or argument that is unknown, missing or has no value: the CLI points at `--help`. */
export class ArgumentError extends UsageError {
  constructor(message: string) {
    super(message);
    this.name = 'ArgumentError';
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
    // allowNegative: a boolean that defaults to true (GEPA's merge) is switched off by --no-merge.
    return parseArgs({ args, options, allowPositionals: true, allowNegative: true, strict: true });
  } catch (error) {
    throw new ArgumentError(parseArgsProblem(error as NodeJS.ErrnoException));
  }
}

/** node:util's parseArgs errors in our words ("Unknown option '--x'. To specify a positional ..." is not). */
function parseArgsProblem(error: NodeJS.ErrnoException): string {
  const quoted = /'([^']+)'/.exec(error.message)?.[1] ?? '';
  const flag = quoted.replace(/^-\w, /, '').replace(/ <value>$/, '');
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return `unknown option ${flag}`;
  if (error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE')
    return /argument missing/.test(error.message) ? `${flag} needs a value` : `${flag} takes no value`;
  if (error.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') return `unexpected argument "${quoted}"`;
  return error.message;
}

/** What the errno codes of file and network failures mean, as a person says it. */
const ERRNO: Record<string, string> = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EISDIR: 'it is a directory',
  ENOTDIR: 'a part of the path is not a directory',
  ENOSPC: 'no space left on the device',
  EROFS: 'the file system is read-only',
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'the connection was reset',
  ENOTFOUND: 'no such host',
  ETIMEDOUT: 'timed out',
};

/**
 * A failure as the CLI says it: its own errors as they are; a file or network error with its
 * path or address and what its code means; a module that cannot be found by its name; anything
 * else by its message. The stack trace is left to `--debug`.
 */
export function describeFailure(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (error instanceof UsageError || error instanceof CommandError) return error.message;
  const errno = error as NodeJS.ErrnoException & { address?: string; port?: number };
  if (errno.code === 'ERR_MODULE_NOT_FOUND') {
    const module = /Cannot find (?:module|package) '([^']+)'/.exec(error.message)?.[1];
    return module === undefined ? error.message : `cannot find the module ${module}`;
  }
  const cause = error.cause instanceof Error ? (error.cause as typeof errno) : undefined;
  const system = errno.code !== undefined && ERRNO[errno.code] !== undefined ? errno : cause;
  if (system?.code !== undefined && ERRNO[system.code] !== undefined) {
    const where = system.path ?? (system.address === undefined ? undefined : `${system.address}:${system.port}`);
    const what =
      where === undefined ? '' : `${system.syscall === 'connect' ? 'cannot reach' : 'cannot open'} ${where}: `;
    return `${what}${ERRNO[system.code]}`;
  }
  return error.message;
}

/** A message on one line: the lines of a multi-line one joined with "; ". */
export function oneLine(message: string): string {
  return message
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .join('; ');
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

const DURATION_UNITS: Record<string, number> = { '': 1, s: 1, m: 60, h: 3600 };

/** A duration above 0 in seconds: `90`, `90s`, `1.5m`, `2h`; undefined when not given. */
export function durationArg(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const match = /^(\d+(?:\.\d+)?)\s*(s|m|h)?$/i.exec(value.trim());
  const seconds = match ? Number(match[1]) * DURATION_UNITS[(match[2] ?? '').toLowerCase()] : Number.NaN;
  if (!(seconds > 0))
    throw new UsageError(
      `${name} must be a duration above 0 such as 90s, 5m or 2h (a bare number is seconds), not "${value}"`,
    );
  return seconds;
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
