#!/usr/bin/env node
import { ArgumentError, CommandError, describeFailure, oneLine, UsageError } from './args.js';

interface Command {
  readonly run: (args: string[]) => Promise<void>;
  readonly usage: string;
}

/** Commands load on use: `agl export` need not load the server, nor `agl query` the runner. */
const COMMANDS: Record<string, () => Promise<Command>> = {
  demo: async () => {
    const m = await import('./demo-command.js');
    return { run: m.demo, usage: m.DEMO_USAGE };
  },
  serve: async () => {
    const m = await import('./serve.js');
    return { run: m.serve, usage: m.SERVE_USAGE };
  },
  query: async () => {
    const m = await import('./query-command.js');
    return { run: m.query, usage: m.QUERY_USAGE };
  },
  export: async () => {
    const m = await import('./export-command.js');
    return { run: m.exportDataset, usage: m.EXPORT_USAGE };
  },
  runner: async () => {
    const m = await import('./runner-command.js');
    return { run: m.runner, usage: m.RUNNER_USAGE };
  },
  train: async () => {
    const m = await import('./train-command.js');
    return { run: m.train, usage: m.TRAIN_USAGE };
  },
  eval: async () => {
    const m = await import('./eval-command.js');
    return { run: m.evaluate, usage: m.EVAL_USAGE };
  },
  compact: async () => {
    const m = await import('./compact-command.js');
    return { run: m.compact, usage: m.COMPACT_USAGE };
  },
};
/** Agent Lightning's name for the server. */
COMMANDS.store = COMMANDS.serve;

async function usage(): Promise<string> {
  const commands = await Promise.all(
    ['demo', 'serve', 'query', 'export', 'runner', 'train', 'eval', 'compact'].map((name) => COMMANDS[name]()),
  );
  return `agl: turn what AI agents do into training data\n\n${commands.map((c) => c.usage).join('\n\n')}\n`;
}

async function main(argv: string[]): Promise<void> {
  const [name, ...args] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(await usage());
    return;
  }
  const load = COMMANDS[name];
  if (!load)
    throw new UsageError(
      `unknown command "${name}"; the commands are ${Object.keys(COMMANDS).join(', ')} (agl --help)`,
    );
  const command = await load();
  // `agl runner ... -- node agent.js --help`: what follows `--` is the agent's.
  const own = args.includes('--') ? args.slice(0, args.indexOf('--')) : args;
  if (own.includes('--help') || own.includes('-h')) {
    process.stdout.write(`${command.usage}\n`);
    return;
  }
  try {
    await command.run(args);
  } catch (error) {
    if (error instanceof ArgumentError) error.message = `${error.message} (agl ${name} --help lists the options)`;
    throw error;
  }
}

/** `--debug` (before any `--`) or AGL_DEBUG=1: a failure prints its stack trace too. */
function debugAsked(argv: string[]): boolean {
  const own = argv.includes('--') ? argv.slice(0, argv.indexOf('--')) : argv;
  return own.includes('--debug') || /^(1|true|yes)$/i.test(process.env.AGL_DEBUG ?? '');
}

const argv = process.argv.slice(2);
const debug = debugAsked(argv);
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 15)) {
  console.error(
    `agl: agl needs Node.js 22.15 or later and this is Node.js ${process.versions.node}; in a clone of agl, npm run agl -- <command> runs it with the Node the project installs`,
  );
  process.exit(1);
}
const dashDash = argv.indexOf('--');
const withoutDebug = argv.filter((arg, i) => arg !== '--debug' || (dashDash !== -1 && i > dashDash));
main(withoutDebug).catch((error: unknown) => {
  const described = describeFailure(error);
  const ours = error instanceof UsageError || error instanceof CommandError;
  // An error of no known kind is a bug or a surprise: say where its stack trace is. Ours say it
  // in one line, except where they quote a program's output (a failed SFT training command).
  const unknown = !ours && described === (error as Error)?.message;
  const hint = unknown && !debug ? ' (--debug or AGL_DEBUG=1 prints the stack trace)' : '';
  console.error(`agl: ${ours ? described : oneLine(described)}${hint}`);
  if (debug) console.error((error as Error)?.stack ?? String(error));
  process.exit(error instanceof UsageError ? 2 : 1);
});
