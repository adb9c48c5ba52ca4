#!/usr/bin/env node
import { CommandError, UsageError } from './args.js';

/** Commands load on use: `agl export` need not load the server, nor `agl query` the runner. */
const COMMANDS: Record<string, () => Promise<(args: string[]) => Promise<void>>> = {
  serve: async () => (await import('./serve.js')).serve,
  store: async () => (await import('./serve.js')).serve,
  query: async () => (await import('./query-command.js')).query,
  export: async () => (await import('./export-command.js')).exportDataset,
  runner: async () => (await import('./runner-command.js')).runner,
  demo: async () => (await import('./demo-command.js')).demo,
};

async function usage(): Promise<string> {
  const [demo, serve, query, exporting, runner] = await Promise.all([
    import('./demo-command.js'), import('./serve.js'), import('./query-command.js'), import('./export-command.js'), import('./runner-command.js'),
  ]);
  return `agl: turn what AI agents do into training data

${demo.DEMO_USAGE}

${serve.SERVE_USAGE}

${query.QUERY_USAGE}

${exporting.EXPORT_USAGE}

${runner.RUNNER_USAGE}
`;
}

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(await usage());
    return;
  }
  const load = COMMANDS[command];
  if (!load) throw new UsageError(`unknown command "${command}"\n\n${await usage()}`);
  await (await load())(args);
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError || error instanceof CommandError) {
    console.error(`agl: ${error.message}`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  console.error(`agl: ${(error as Error)?.stack ?? String(error)}`);
  process.exit(1);
});
