#!/usr/bin/env node
import { CommandError, UsageError } from './args.js';

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
  compact: async () => {
    const m = await import('./compact-command.js');
    return { run: m.compact, usage: m.COMPACT_USAGE };
  },
};
/** Agent Lightning's name for the server. */
COMMANDS.store = COMMANDS.serve;

async function usage(): Promise<string> {
  const commands = await Promise.all(
    ['demo', 'serve', 'query', 'export', 'runner', 'train', 'compact'].map((name) => COMMANDS[name]()),
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
  if (!load) throw new UsageError(`unknown command "${name}"\n\n${await usage()}`);
  const command = await load();
  // `agl runner ... -- node agent.js --help`: what follows `--` is the agent's.
  const own = args.includes('--') ? args.slice(0, args.indexOf('--')) : args;
  if (own.includes('--help') || own.includes('-h')) {
    process.stdout.write(`${command.usage}\n`);
    return;
  }
  await command.run(args);
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError || error instanceof CommandError) {
    console.error(`agl: ${error.message}`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  console.error(`agl: ${(error as Error)?.stack ?? String(error)}`);
  process.exit(1);
});
