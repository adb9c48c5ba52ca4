import { resolve } from 'node:path';
import { compactSpansDir } from '../store/span-files.js';
import { parseCommandArgs, UsageError } from './args.js';

export const COMPACT_USAGE = `agl compact --spans-dir DIR
  Merges the Parquet files of each partition of a span directory (agl serve --spans-dir) into
  one file, while the servers run. A query that lists a partition in the moment between the
  merged file's rename and the removal of the small files reads that partition's rows twice.`;

const OPTIONS = { 'spans-dir': { type: 'string' } } as const;

export async function compact(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, OPTIONS);
  if (values['spans-dir'] === undefined) throw new UsageError(`--spans-dir is required\n\n${COMPACT_USAGE}`);
  const merged = await compactSpansDir(resolve(values['spans-dir']));
  console.log(`agl: merged ${merged} files`);
}
