import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { compactSpansDir } from '../store/span-files.js';
import { ArgumentError, parseCommandArgs, UsageError } from './args.js';

export const COMPACT_USAGE = `agl compact --spans-dir DIR
  Merges the Parquet files of each partition of a span directory (agl serve --spans-dir) into
  one file, while the servers run. A query that lists a partition in the moment between the
  merged file's rename and the removal of the small files reads that partition's rows twice.`;

const OPTIONS = { 'spans-dir': { type: 'string' } } as const;

export async function compact(args: string[]): Promise<void> {
  const { values } = parseCommandArgs(args, OPTIONS);
  if (values['spans-dir'] === undefined) throw new ArgumentError('--spans-dir DIR is required');
  const dir = resolve(values['spans-dir']);
  const isDir = await stat(dir).then(
    (found) => found.isDirectory(),
    () => false,
  );
  if (!isDir) throw new UsageError(`--spans-dir ${dir} is not a directory: give the one agl serve --spans-dir writes`);
  const merged = await compactSpansDir(dir);
  console.log(`agl: merged ${merged} files`);
}
