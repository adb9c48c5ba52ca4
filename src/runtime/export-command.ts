import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { extname, join, resolve } from 'node:path';
import { finished } from 'node:stream/promises';
import type { Adapter, AdapterReport, SkippedRecord } from '../adapters/adapter.js';
import type { RecordKind, Records } from '../adapters/arrow.js';
import { MESSAGES_ADAPTER, type MessagesOptions } from '../adapters/messages.js';
import { TRAJECTORIES_ADAPTER, type TrajectoryOptions } from '../adapters/trajectories.js';
import { isRolloutMode } from '../sql/literals.js';
import { TRIPLETS_ADAPTER, type Credit, type RewardMatch, type TripletOptions } from '../adapters/triplets.js';
import { allRows } from '../adapters/source.js';
import type { QueryTarget } from '../client/query-client.js';
import { jsonlToParquet, PARQUET_COLUMNS } from '../adapters/parquet.js';
import { readable, UNREADABLE_SPANS_SQL } from '../sql/derived.js';
import { progressLine } from './progress.js';
import { ArgumentError, choiceArg, CommandError, countArg, parseCommandArgs, UsageError } from './args.js';
import { queryTarget } from './query-command.js';

export const EXPORT_USAGE = `agl export messages|triplets|trajectories --out FILE.jsonl|.parquet|.arrow [--db ./agl.duckdb | --url URL]
          [--spans-dir DIR] [--token T] [--strict] [--where "<SQL condition on rollout_id, attempt_id, trace_id, model ...
          and the rollout's input, mode, status, metadata>"] [--min-reward X] [--mode train|val]
          triplets, trajectories: [--agent-match REGEX] [--span-match REGEX] [--repair-flat]
                    [--reward-match first_occurrence|first_sibling] [--credit step|final|discounted] [--gamma 1]
          trajectories: [--trajectory-mode transition|trajectory] [--max-prompt-length N] [--max-response-length N]
                    [--overlong truncate|drop]
  messages: one OpenAI fine-tuning record ({messages, tools, parallel_tool_calls}) per recorded
  LLM call; records that fail validation are skipped and counted, with their reasons.
  triplets: one {prompt, response, reward, metadata} per LLM call of each attempt, in call order.
  trajectories: token-level rows (prompt_ids, response_ids, response_mask, response_logprobs,
  reward, group_key) for RL trainers.
  --spans-dir: every server's spans moved to a span directory (agl serve --spans-dir), read in
  place; not the spans still waiting to move, nor rollouts (through a server, --url reads
  those too).
  Spans whose stored attributes cannot be read (written by an older agl) are left out and named;
  --strict exits 1 when anything was skipped.`;

const OUT_TYPES = ['.jsonl', '.ndjson', '.parquet', '.arrow'];

interface Options {
  messages: MessagesOptions;
  triplets: TripletOptions;
  trajectories: TrajectoryOptions;
}

/** The adapter of each kind `agl export` writes: a new kind is one more entry (src/adapters/adapter.ts). */
const ADAPTERS: { [K in RecordKind]: Adapter<Options[K], Records[K], unknown> } = {
  messages: MESSAGES_ADAPTER,
  triplets: TRIPLETS_ADAPTER,
  trajectories: TRAJECTORIES_ADAPTER,
};
const isKind = (kind: string): kind is RecordKind => Object.hasOwn(ADAPTERS, kind);

const OPTIONS = {
  db: { type: 'string' },
  'spans-dir': { type: 'string' },
  url: { type: 'string' },
  token: { type: 'string' },
  where: { type: 'string' },
  'min-reward': { type: 'string' },
  out: { type: 'string' },
  'agent-match': { type: 'string' },
  'span-match': { type: 'string' },
  'reward-match': { type: 'string' },
  credit: { type: 'string' },
  gamma: { type: 'string' },
  mode: { type: 'string' },
  'trajectory-mode': { type: 'string' },
  'repair-flat': { type: 'boolean' },
  'max-prompt-length': { type: 'string' },
  'max-response-length': { type: 'string' },
  overlong: { type: 'string' },
  strict: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseCommandArgs<typeof OPTIONS>>['values'];

export async function exportDataset(args: string[]): Promise<void> {
  const { values, positionals } = parseCommandArgs(args, OPTIONS);
  if (positionals.length !== 1) throw new ArgumentError('say what to export: messages, triplets or trajectories');
  const [kind] = positionals;
  if (!isKind(kind)) throw new UsageError(`agl export knows messages, triplets and trajectories, not "${kind}"`);
  if (values.out === undefined) throw new ArgumentError('--out FILE is required');
  const type = extname(values.out).toLowerCase();
  if (!OUT_TYPES.includes(type)) throw new UsageError(`--out must end in ${OUT_TYPES.join(', ')}: "${values.out}"`);
  const options = adapterOptions(values); // every argument checked before the store is opened

  const out = resolve(values.out);
  const target = await queryTarget(values);
  const progress = progressLine(`exporting ${kind}`);
  const skipped: SkippedRecord[] = [];
  let written: { count: number; report: AdapterReport };
  try {
    skipped.push(...(await unreadableSpans(target)));
    written = await exportKind(kind, options[kind], target, out, type, progress);
  } finally {
    progress.done();
    await target.close();
  }
  const report = { skipped: [...skipped, ...written.report.skipped], notes: written.report.notes };
  printSummary(written.count, values.out, report);
  if (values.strict && report.skipped.length > 0) throw new CommandError(`--strict: ${report.skipped.length} skipped`);
}

/** Writes the records of one kind; answers how many, and the adapter's report of its read. */
async function exportKind<K extends RecordKind>(
  kind: K,
  options: Options[K],
  target: QueryTarget,
  out: string,
  type: string,
  progress: ReturnType<typeof progressLine>,
): Promise<{ count: number; report: AdapterReport }> {
  const adapter: Adapter<Options[K], Records[K], unknown> = ADAPTERS[kind];
  const { sql, sqlFor, batches, stats } = await adapter.read(target, options);
  // Records that SQL gives whole are written by DuckDB itself: no row passes through JS.
  const bySql = sql !== undefined && (type === '.parquet' || (type !== '.arrow' && sqlFor === undefined));
  const count = bySql
    ? await target.exportTo(sql, out, type === '.parquet' ? 'parquet' : 'ndjson', progress.fraction)
    : await writeRecords(kind, batches, out, type, progress.count);
  return { count, report: adapter.report(stats) };
}

const UNREADABLE = 'span whose stored attributes are not readable JSON';

/**
 * The spans no view reads because their attributes cannot be parsed (src/sql/derived.ts): they are in no
 * record, so the summary names them. A file that an older agl wrote, opened read-only, has no
 * record of them yet: its spans are checked one by one.
 */
async function unreadableSpans(target: QueryTarget): Promise<SkippedRecord[]> {
  let rows: Record<string, unknown>[];
  try {
    rows = await allRows(target, UNREADABLE_SPANS_SQL);
  } catch (error) {
    if (!/derived_skipped/.test((error as Error).message)) throw error;
    rows = await allRows(target, `SELECT rollout_id, span_id FROM spans WHERE NOT ${readable()}`);
  }
  return rows.map((row) => ({
    rollout_id: row.rollout_id as string | null,
    span_id: String(row.span_id),
    reason: UNREADABLE,
  }));
}

/** Records as JSONL, Arrow IPC, or Parquet through DuckDB from a JSONL scratch file; returns how many. */
async function writeRecords<K extends RecordKind>(
  kind: K,
  batches: AsyncIterable<Records[K][]>,
  out: string,
  type: string,
  onCount: (n: number) => void,
): Promise<number> {
  let written = 0;
  async function* counted() {
    for await (const batch of batches)
      for (const record of batch) {
        yield record;
        if (++written % 1000 === 0) onCount(written);
      }
  }
  if (type === '.arrow') {
    // apache-arrow loads only for an Arrow file.
    const { writeArrowFile } = await import('../adapters/arrow.js');
    await writeArrowFile(kind, counted(), out);
    return written;
  }
  const scratch = type === '.parquet' ? await mkdtemp(join(tmpdir(), 'agl-export-')) : undefined;
  try {
    const lines = scratch ? join(scratch, 'records.jsonl') : out;
    const file = createWriteStream(lines);
    // A value the agent sent nested thousands deep (a tool schema) is stored and read, but
    // JSON.stringify overflows the stack on it: that record is left out and counted, not the export failed.
    let tooDeep = 0;
    for await (const record of counted()) {
      let line: string;
      try {
        line = JSON.stringify(record);
      } catch (error) {
        if (!(error instanceof RangeError)) throw error;
        tooDeep++;
        continue;
      }
      if (!file.write(`${line}\n`)) await new Promise<void>((done) => file.once('drain', () => done()));
    }
    file.end();
    await finished(file);
    if (tooDeep > 0) console.error(`  ${tooDeep} record(s) left out: nested too deep to write as JSON`);
    if (scratch) await jsonlToParquet(lines, out, PARQUET_COLUMNS[kind]);
    return written - tooDeep;
  } finally {
    if (scratch) await rm(scratch, { recursive: true, force: true });
  }
}

function adapterOptions(values: Values): Options {
  const minReward = values['min-reward'] === undefined ? undefined : Number(values['min-reward']);
  if (minReward !== undefined && !Number.isFinite(minReward))
    throw new UsageError(`--min-reward must be a number, not "${values['min-reward']}"`);
  const gamma = values.gamma === undefined ? undefined : Number(values.gamma);
  if (gamma !== undefined && !(gamma >= 0 && gamma <= 1))
    throw new UsageError(`--gamma must be a number from 0 to 1, not "${values.gamma}"`);
  for (const flag of ['agent-match', 'span-match'] as const) {
    const pattern = values[flag];
    if (pattern === undefined) continue;
    try {
      new RegExp(pattern);
    } catch {
      throw new UsageError(`--${flag} is not a regular expression: "${pattern}"`);
    }
  }
  const rolloutMode = values.mode;
  if (rolloutMode !== undefined && !isRolloutMode(rolloutMode))
    throw new UsageError(`--mode takes a rollout mode such as train or val, not "${rolloutMode}"`);
  const triplets: TripletOptions = {
    where: values.where,
    minReward,
    rolloutMode,
    agentMatch: values['agent-match'],
    spanMatch: values['span-match'],
    repairFlat: values['repair-flat'],
    rewardMatch: choiceArg<RewardMatch>(
      '--reward-match',
      values['reward-match'],
      ['first_occurrence', 'first_sibling'],
      'first_occurrence',
    ),
    credit: choiceArg<Credit>('--credit', values.credit, ['step', 'final', 'discounted'], 'step'),
    gamma,
  };
  return {
    messages: { where: values.where, minReward, rolloutMode },
    triplets,
    trajectories: {
      ...triplets,
      mode: choiceArg(
        '--trajectory-mode',
        values['trajectory-mode'],
        ['transition', 'trajectory'] as const,
        'transition',
      ),
      maxPromptLength: positive('--max-prompt-length', values['max-prompt-length']),
      maxResponseLength: positive('--max-response-length', values['max-response-length']),
      overlong: choiceArg('--overlong', values.overlong, ['truncate', 'drop'] as const, 'truncate'),
    },
  };
}

function printSummary(written: number, out: string, { skipped, notes }: AdapterReport): void {
  console.error(`agl: wrote ${written} record(s) to ${out}${skipped.length ? `; skipped ${skipped.length}:` : ''}`);
  for (const note of notes) console.error(`  ${note}`);
  const reasons = new Map<string, { count: number; example: SkippedRecord }>();
  for (const s of skipped) {
    const seen = reasons.get(s.reason);
    if (seen) seen.count++;
    else reasons.set(s.reason, { count: 1, example: s });
  }
  for (const [reason, { count, example }] of reasons) {
    console.error(`  ${count} x ${reason} (e.g. rollout ${example.rollout_id ?? '-'}, span ${example.span_id})`);
    if (reason === UNREADABLE && count > 1) {
      const spans = skipped.filter((s) => s.reason === reason).map((s) => s.span_id);
      console.error(`    spans: ${spans.slice(0, 10).join(', ')}${count > 10 ? ', ...' : ''}`);
    }
  }
}

function positive(name: string, value: string | undefined): number | undefined {
  const n = countArg(name, value);
  if (n === 0) throw new UsageError(`${name} must be above 0`);
  return n;
}
