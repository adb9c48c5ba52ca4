import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { extname, join, resolve } from 'node:path';
import { finished } from 'node:stream/promises';
import { DuckDBInstance } from '@duckdb/node-api';
import { traceToMessages, type SkippedRecord } from '../adapters/messages.js';
import { sqlText } from '../store/sql.js';
import { parseCommandArgs, UsageError } from './args.js';
import { queryTarget } from './query-command.js';

export const EXPORT_USAGE = `agl export messages --out FILE.jsonl|.parquet [--db ./agl.duckdb | --url URL] [--token T]
          [--where "<SQL condition on rollout_id, attempt_id, trace_id>"] [--min-reward X]
  Writes one OpenAI fine-tuning record ({messages, tools, parallel_tool_calls}) per recorded LLM
  call; records that fail validation are skipped and counted, with their reasons.`;

const OUT_TYPES = ['.jsonl', '.ndjson', '.parquet'];

export async function exportDataset(args: string[]): Promise<void> {
  const { values, positionals } = parseCommandArgs(args, {
    db: { type: 'string' },
    url: { type: 'string' },
    token: { type: 'string' },
    where: { type: 'string' },
    'min-reward': { type: 'string' },
    out: { type: 'string' },
  });
  const [kind] = positionals;
  if (positionals.length !== 1) throw new UsageError(`say what to export\n${EXPORT_USAGE}`);
  if (kind !== 'messages') throw new UsageError(`agl export knows "messages" (triplets and trajectories are not built yet), not "${kind}"`);
  if (values.out === undefined) throw new UsageError(`--out FILE is required\n${EXPORT_USAGE}`);
  const type = extname(values.out).toLowerCase();
  if (!OUT_TYPES.includes(type)) throw new UsageError(`--out must end in ${OUT_TYPES.join(', ')}: "${values.out}"`);
  const minReward = values['min-reward'] === undefined ? undefined : Number(values['min-reward']);
  if (minReward !== undefined && !Number.isFinite(minReward)) throw new UsageError(`--min-reward must be a number, not "${values['min-reward']}"`);

  const out = resolve(values.out);
  const target = await queryTarget(values);
  const skipped: SkippedRecord[] = [];
  let written = 0;
  const scratch = type === '.parquet' ? await mkdtemp(join(tmpdir(), 'agl-export-')) : undefined;
  try {
    const lines = scratch ? join(scratch, 'records.jsonl') : out;
    const file = createWriteStream(lines);
    for await (const record of traceToMessages(target, { where: values.where, minReward }, skipped)) {
      if (!file.write(`${JSON.stringify(record)}\n`)) await new Promise<void>((done) => file.once('drain', () => done()));
      written++;
    }
    file.end();
    await finished(file);
    if (scratch) await jsonlToParquet(lines, out);
  } finally {
    await target.close();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  }
  console.error(`agl: wrote ${written} record(s) to ${values.out}${skipped.length ? `; skipped ${skipped.length}:` : ''}`);
  const reasons = new Map<string, number>();
  for (const s of skipped) reasons.set(s.reason, (reasons.get(s.reason) ?? 0) + 1);
  for (const [reason, count] of reasons) {
    const example = skipped.find((s) => s.reason === reason)!;
    console.error(`  ${count} x ${reason} (e.g. rollout ${example.rollout_id ?? '-'}, span ${example.span_id})`);
  }
}

/** Parquet through DuckDB: columns messages and tools as JSON, parallel_tool_calls BOOLEAN. */
async function jsonlToParquet(lines: string, out: string): Promise<void> {
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    await connection.run(`COPY (SELECT * FROM read_json(${sqlText(lines)}, format = 'newline_delimited',
      columns = {messages: 'JSON', tools: 'JSON', parallel_tool_calls: 'BOOLEAN'})) TO ${sqlText(out)} (FORMAT PARQUET)`);
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
}
