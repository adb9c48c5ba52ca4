import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { finished } from 'node:stream/promises';
import { SFT_PLACEHOLDERS, type SftPlaceholder } from './options.js';

/**
 * The user's training command: an external program (`python train.py {dataset} {output}`),
 * usually on a GPU machine, run by /bin/sh in a process group of its own so that a stop reaches
 * everything it started. Its output is streamed line by line to a log file, to stderr, and into
 * a tail kept for the store and for the error message; `AGL_MODEL_ENDPOINT=` / `AGL_MODEL_NAME=`
 * lines say where the trained model is served.
 */

export type PlaceholderValues = Record<SftPlaceholder, string>;

const PLACEHOLDER = new RegExp(`\\{(${SFT_PLACEHOLDERS.join('|')})\\}`, 'g');

/** A value as one word for /bin/sh: single-quoted, its own single quotes closed and escaped. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/** `template` with its placeholders filled: shell-quoted for a command, as they are otherwise. Other braces stay. */
export function fillPlaceholders(template: string, values: PlaceholderValues, quote: boolean): string {
  return template.replace(PLACEHOLDER, (_match, name: SftPlaceholder) =>
    quote ? shellQuote(values[name]) : values[name],
  );
}

/** The placeholders as environment variables (`AGL_SFT_DATASET` ...), for scripts that prefer them. */
export function placeholderEnv(values: PlaceholderValues): Record<string, string> {
  return Object.fromEntries(Object.entries(values).map(([name, value]) => [`AGL_SFT_${name.toUpperCase()}`, value]));
}

export interface CommandOutcome {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The last lines of its output (stdout and stderr as they came), at most TAIL_CHARS. */
  readonly tail: string;
  /** The last `AGL_MODEL_ENDPOINT=` / `AGL_MODEL_NAME=` it printed. */
  readonly endpoint?: string;
  readonly model?: string;
  /** Why agl stopped it, if it did. */
  readonly stopped?: 'timeout' | 'signal';
}

interface CommandOptions {
  readonly env: Record<string, string>;
  /** Every line of its output goes here. */
  readonly logFile: string;
  readonly timeoutMs?: number;
  /** Between SIGTERM and SIGKILL when it is stopped. */
  readonly graceMs: number;
  readonly signal: AbortSignal;
  /** Each line as it comes, e.g. to stderr. */
  readonly onLine?: (line: string) => void;
}

const TAIL_CHARS = 4000;
const MARKER = /^(AGL_MODEL_ENDPOINT|AGL_MODEL_NAME)=(.*)$/;
/** After the command exited, how long its pipes may stay open (held by something it left running). */
const DRAIN_MS = 1000;

/** Runs `command` to its end, or until the timeout or `signal` stops it (its process group: SIGTERM, then SIGKILL). */
export async function runCommand(command: string, options: CommandOptions): Promise<CommandOutcome> {
  const log = createWriteStream(options.logFile);
  const tail = new Tail(TAIL_CHARS);
  const markers: { endpoint?: string; model?: string } = {};
  const take = (line: string) => {
    log.write(`${line}\n`);
    tail.push(line);
    options.onLine?.(line);
    const marker = MARKER.exec(line.trim());
    if (marker) markers[marker[1] === 'AGL_MODEL_ENDPOINT' ? 'endpoint' : 'model'] = marker[2].trim();
  };
  const child = spawn('/bin/sh', ['-c', command], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  const streams = [child.stdout, child.stderr].map((stream) => readLines(stream, take));
  let stopped: CommandOutcome['stopped'];
  const stop = (why: 'timeout' | 'signal') => {
    stopped ??= why;
    killGroup(child.pid, 'SIGTERM');
    // Also after the command itself ended: what it started and that ignored SIGTERM. The group's id
    // is not reused while any member lives, so this reaches nothing else.
    setTimeout(() => killGroup(child.pid, 'SIGKILL'), options.graceMs).unref();
  };
  const onAbort = () => stop('signal');
  options.signal.addEventListener('abort', onAbort, { once: true });
  if (options.signal.aborted) onAbort();
  const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => stop('timeout'), options.timeoutMs);
  try {
    const [exitCode, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (code, sig) => resolve([code, sig]));
    });
    // Its last lines are in the pipes; a process it left running (a model server) may hold them open.
    await Promise.race([Promise.all(streams), new Promise((resolve) => setTimeout(resolve, DRAIN_MS).unref())]);
    child.stdout.destroy();
    child.stderr.destroy();
    return { exitCode, signal, tail: tail.text(), ...markers, ...(stopped ? { stopped } : {}) };
  } finally {
    clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
    log.end();
    await finished(log);
  }
}

function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is gone already
  }
}

/** Calls `onLine` for each line of `stream` (the last one even without its newline); resolves at its end. */
function readLines(stream: NodeJS.ReadableStream, onLine: (line: string) => void): Promise<void> {
  let pending = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    pending += chunk;
    const newline = pending.lastIndexOf('\n');
    if (newline < 0) return;
    for (const line of pending.slice(0, newline).split('\n')) onLine(line.replace(/\r$/, ''));
    pending = pending.slice(newline + 1);
  });
  return new Promise((resolve) => {
    const end = () => {
      if (pending !== '') onLine(pending);
      pending = '';
      resolve();
    };
    stream.once('end', end);
    stream.once('close', end);
  });
}

/** The last lines of a stream of lines, at most `limit` characters in all (a longer last line keeps its end). */
class Tail {
  private lines: string[] = [];
  private size = 0;

  constructor(private readonly limit: number) {}

  push(line: string): void {
    this.lines.push(line);
    this.size += line.length + 1;
    while (this.size > this.limit && this.lines.length > 1) this.size -= (this.lines.shift() ?? '').length + 1;
  }

  text(): string {
    const text = this.lines.join('\n');
    return text.length > this.limit ? text.slice(-this.limit) : text;
  }
}
