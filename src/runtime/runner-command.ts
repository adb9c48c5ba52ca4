import { spawn } from 'node:child_process';
import { StoreClient } from '../client/store-client.js';
import { startTelemetry } from '../instrumentation/telemetry.js';
import type { Agent } from '../runner/agent.js';
import { execAgent } from '../runner/exec-agent.js';
import { AgentModuleError, loadAgent } from '../runner/load-agent.js';
import { Runner, StoreDowntimeError } from '../runner/runner.js';
import {
  ArgumentError,
  choiceArg,
  CommandError,
  countArg,
  durationArg,
  parseCommandArgs,
  UsageError,
  urlArg,
} from './args.js';

export const RUNNER_USAGE = `agl runner <agent-module> | --exec "<command>" [--store http://127.0.0.1:4318] [--token T]
          [--concurrency 1] [--workers 1] [--max-rollouts N] [--worker-id ID] [--on-stop finish|abandon]
          [--max-store-downtime DURATION]
  Takes rollouts from the store and runs the agent on each, recording its LLM calls and spans
  (as agl/register does). <agent-module> exports an agent made with rollout() (default export
  or "agent"). --exec runs a command per rollout, any language: AGL_TASK (JSON), AGL_ROLLOUT_ID,
  AGL_ATTEMPT_ID, AGL_ENDPOINT and OPENAI_BASE_URL (the gateway route) are in its environment;
  exit code 0 is success, a last stdout line "agl-reward: <number>" its reward. --workers P starts
  P runner processes (each --concurrency at once). While the store is away (unreachable, or
  answering 503), runners retry with backoff up to 10 s, saying so once when it goes and once
  when it is back; --max-store-downtime (90s, 5m, 2h) ends them, exit 1, after that long
  (default: no limit). Ctrl-C lets the running rollouts finish (--on-stop abandon: reports them failed at
  once, for the store to retry); a second one exits at once.`;

/** The agent of a module named on the command line: a module with none is a usage error. */
async function loadAgentArg(module: string): Promise<Agent> {
  try {
    return await loadAgent(module);
  } catch (error) {
    throw error instanceof AgentModuleError ? new UsageError(error.message) : error;
  }
}

export async function runner(args: string[]): Promise<void> {
  const { values, positionals } = parseCommandArgs(args, {
    exec: { type: 'string' },
    store: { type: 'string' },
    token: { type: 'string' },
    concurrency: { type: 'string' },
    'max-rollouts': { type: 'string' },
    'worker-id': { type: 'string' },
    workers: { type: 'string' },
    'on-stop': { type: 'string' },
    'max-store-downtime': { type: 'string' },
  });
  if ((values.exec === undefined) === (positionals.length !== 1))
    throw new ArgumentError('give an agent module or --exec "<command>", one of them');
  const storeUrl = urlArg('--store', values.store) ?? 'http://127.0.0.1:4318';
  const concurrency = countArg('--concurrency', values.concurrency) ?? 1;
  if (concurrency < 1) throw new UsageError('--concurrency must be at least 1');
  const maxRollouts = countArg('--max-rollouts', values['max-rollouts']);
  const maxStoreDowntimeSeconds = durationArg('--max-store-downtime', values['max-store-downtime']);
  const token = values.token ?? (process.env.AGL_TOKEN || undefined);
  const workers = countArg('--workers', values.workers) ?? 1;
  if (workers < 1) throw new UsageError('--workers must be at least 1');
  if (workers > 1) {
    if (maxRollouts !== undefined)
      throw new UsageError('--max-rollouts counts the rollouts of one runner; give it without --workers');
    process.exitCode = await runWorkers(args, workers, values['worker-id'] ?? `runner-${process.pid}`);
    return;
  }

  // Recording starts before the agent module loads, as with --import agl/register.
  process.env.AGL_ENDPOINT ??= storeUrl;
  if (token) process.env.AGL_TOKEN ??= token;
  startTelemetry();
  const agent =
    values.exec !== undefined ? execAgent(values.exec, storeUrl, token) : await loadAgentArg(positionals[0]);
  const store = new StoreClient(storeUrl, { token });
  const onStop = choiceArg('--on-stop', values['on-stop'], ['finish', 'abandon'] as const, 'finish');
  const work = new Runner({
    store,
    agent,
    concurrency,
    maxRollouts,
    gatewayUrl: storeUrl,
    gatewayToken: token,
    workerId: values['worker-id'],
    onStop,
    maxStoreDowntimeSeconds,
  });

  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (stop.signal.aborted) {
      console.error(`agl: ${signal} again, exiting without waiting`);
      process.exit(130);
    }
    console.error(
      `agl: ${signal}: ${onStop === 'abandon' ? 'abandoning' : 'finishing'} the running rollouts (again to exit now)`,
    );
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  console.log(`agl: runner ${work.workerId} taking rollouts from ${storeUrl}, ${concurrency} at once`);
  const { rollouts } = await work.run(stop.signal).catch((error: unknown) => {
    if (!(error instanceof StoreDowntimeError)) throw error;
    const retries = `${error.retries} ${error.retries === 1 ? 'retry' : 'retries'}`;
    throw new CommandError(
      `runner ${work.workerId}: the store at ${storeUrl} has been away for ${error.seconds.toFixed(1)} s (${retries}), past --max-store-downtime ${values['max-store-downtime']}; the last failure: ${error.lastFailure}`,
    );
  });
  console.log(`agl: runner ${work.workerId} ran ${rollouts} rollout(s)`);
}

/**
 * P runner processes, each this command without --workers and with its own worker id. Signals
 * go on to them (the first lets their rollouts finish, a second stops them at once); the exit
 * status is the worst of theirs.
 */
async function runWorkers(args: string[], workers: number, workerId: string): Promise<number> {
  const own = withoutOption(withoutOption(args, '--workers'), '--worker-id');
  const children = Array.from({ length: workers }, (_, i) =>
    spawn(
      process.execPath,
      [...process.execArgv, process.argv[1], 'runner', ...own, '--worker-id', `${workerId}-${i + 1}`],
      { stdio: 'inherit' },
    ),
  );
  const forward = (signal: NodeJS.Signals) => {
    for (const child of children) if (child.exitCode === null) child.kill(signal);
  };
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  const codes = await Promise.all(
    children.map(
      (child) =>
        new Promise<number>((resolve) => child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)))),
    ),
  );
  process.off('SIGINT', forward);
  process.off('SIGTERM', forward);
  return Math.max(...codes);
}

/** `args` without `--name value` / `--name=value`. */
function withoutOption(args: string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === name) i++;
    else if (!args[i].startsWith(`${name}=`)) out.push(args[i]);
  }
  return out;
}
