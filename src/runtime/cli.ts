#!/usr/bin/env node
import { CommandError, UsageError } from './args.js';
import { demo, DEMO_USAGE } from './demo-command.js';
import { EXPORT_USAGE, exportDataset } from './export-command.js';
import { query, QUERY_USAGE } from './query-command.js';
import { runner, RUNNER_USAGE } from './runner-command.js';
import { serve, SERVE_USAGE } from './serve.js';

const USAGE = `agl: turn what AI agents do into training data

${DEMO_USAGE}

${SERVE_USAGE}

${QUERY_USAGE}

${EXPORT_USAGE}

${RUNNER_USAGE}
`;

const COMMANDS: Record<string, (args: string[]) => Promise<void>> = {
  serve,
  store: serve,
  query,
  export: exportDataset,
  runner,
  demo,
};

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(USAGE);
    return;
  }
  const run = COMMANDS[command];
  if (!run) throw new UsageError(`unknown command "${command}"\n\n${USAGE}`);
  await run(args);
}

main(process.argv.slice(2)).catch((error: unknown) => {
  if (error instanceof UsageError || error instanceof CommandError) {
    console.error(`agl: ${error.message}`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  console.error(`agl: ${(error as Error)?.stack ?? String(error)}`);
  process.exit(1);
});
