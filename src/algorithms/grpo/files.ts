import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { trainingDoneBody } from '../../api/requests.js';
import { problemOf } from '../../api/schema-fields.js';
import type { TrainingDone } from '../../api/training.js';
import { batchMetadata, type TrainingBatch } from './arrow.js';
import type { ApplyDone, BatchHandoff } from './handoff.js';

/**
 * The files hand-off (`batchesDir`): each batch is written as `batch-000001-<id>.parquet` (the
 * columns and `agl.*` metadata of docs/training.md), under a hidden temp name first and then
 * renamed, so a reader never sees a partial file; the trainer ends it by writing
 * `batch-000001-<id>.done.json` (the body of the HTTP done, also written then renamed). The
 * folder is polled for it. A done file that does not parse, or whose model the run refuses, is
 * reported once and waited on until it changes.
 */

const POLL_MS = 200;

/** `batch-000001-<id>`: the name of a batch's files, without extension. */
const batchFileName = (batch: Pick<TrainingBatch, 'step' | 'batchId'>) =>
  `batch-${String(batch.step).padStart(6, '0')}-${batch.batchId}`;

export class BatchFiles implements BatchHandoff {
  /** Aborted by close(): every wait for a done file stops. */
  private closing = new AbortController();

  constructor(
    private readonly dir: string,
    private readonly apply: ApplyDone,
    private readonly log: (line: string) => void,
  ) {}

  async offer(batch: TrainingBatch, signal: AbortSignal): Promise<{ done: Promise<TrainingDone | null> }> {
    await mkdir(this.dir, { recursive: true });
    const name = batchFileName(batch);
    await writeParquet(batch, join(this.dir, `${name}.parquet`), join(this.dir, `.${name}.tmp`));
    const stop = AbortSignal.any([signal, this.closing.signal]);
    return { done: this.waitForDone(batch, join(this.dir, `${name}.done.json`), stop) };
  }

  close(): void {
    this.closing.abort();
    this.closing = new AbortController();
  }

  /** Polls for the done file until it holds a done the run takes; null once `signal` is aborted. */
  private async waitForDone(batch: TrainingBatch, path: string, signal: AbortSignal): Promise<TrainingDone | null> {
    let refused: number | undefined; // the mtime of a file reported already
    while (!signal.aborted) {
      const modified = (await stat(path).catch(() => null))?.mtimeMs;
      if (modified !== undefined && modified !== refused) {
        try {
          const done = parseDone(await readFile(path, 'utf8'));
          await this.apply(batch, done);
          return done;
        } catch (error) {
          refused = modified;
          this.log(`${path}: ${(error as Error).message}; waiting for the trainer to write it again`);
        }
      }
      await pause(POLL_MS, signal);
    }
    return null;
  }
}

/** A done file's text as a done; an Error that names what is wrong. */
function parseDone(text: string): TrainingDone {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`not JSON: ${(error as Error).message}`);
  }
  const parsed = trainingDoneBody.safeParse(value, { error: problemOf });
  if (parsed.success) return parsed.data;
  const [issue] = parsed.error.issues;
  throw new Error(`${issue.path.join('.') || 'the done'} ${issue.message}`);
}

/** Writes the batch as Parquet at `tmp` (through a JSONL scratch file), then renames it to `path`. */
async function writeParquet(batch: TrainingBatch, path: string, tmp: string): Promise<void> {
  const scratch = `${tmp}.jsonl`;
  const lines = batch.rows.map((row, i) =>
    JSON.stringify({
      batch_id: batch.batchId,
      step: batch.step,
      group_id: row.groupId,
      rollout_id: row.rolloutId,
      attempt_id: row.attemptId,
      model_version: row.modelVersion,
      prompt_ids: Array.from(row.promptIds),
      response_ids: Array.from(row.responseIds),
      response_mask: Array.from(row.responseMask),
      response_logprobs: Array.from(row.responseLogprobs),
      reward: row.reward,
      advantage: batch.advantages[i],
    }),
  );
  // DuckDB loads with the first batch written, not with `agl/algorithms`.
  const { jsonlToParquet, PARQUET_COLUMNS } = await import('../../adapters/parquet.js');
  try {
    await writeFile(scratch, `${lines.join('\n')}\n`);
    await jsonlToParquet(scratch, tmp, PARQUET_COLUMNS.training_batch, batchMetadata(batch));
    await rename(tmp, path);
  } finally {
    await rm(scratch, { force: true });
    await rm(tmp, { force: true });
  }
}

/** Resolves after `ms`, or at once when `signal` is aborted. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
