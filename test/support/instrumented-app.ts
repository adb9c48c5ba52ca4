import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

/** `agl/register`, compiled. */
export const REGISTER = join(ROOT, 'dist', 'src', 'instrumentation', 'register.js');
/** The example agents, plain JS in the source tree (they resolve `openai`, `agl` from the project). */
export const APPS = join(ROOT, 'test', 'apps');
/** The project's examples/ folder. */
export const EXAMPLES = join(ROOT, 'examples');

export interface AppRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs an app as a child process, `node --import agl/register app` unless `register` is false. */
export function runApp(
  app: string,
  env: Record<string, string | undefined>,
  options: { register?: boolean; onStdout?: (text: string) => void; signalAfter?: [RegExp, NodeJS.Signals] } = {},
): Promise<AppRun> {
  const args = options.register === false ? [join(APPS, app)] : ['--import', REGISTER, join(APPS, app)];
  const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (options.signalAfter?.[0].test(stdout)) {
      child.kill(options.signalAfter[1]);
      options.signalAfter = undefined;
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
}
