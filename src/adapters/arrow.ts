/**
 * Training records as `apache-arrow` record batches, one schema per kind. Free-form JSON
 * (messages, tools, metadata values) is UTF-8 JSON text, as in Parquet; token ids, masks and
 * logprobs are typed lists, so a trainer reads them without parsing.
 */
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import {
  Bool,
  Field,
  Float64,
  Int32,
  Int64,
  Int8,
  List,
  RecordBatch,
  RecordBatchFileWriter,
  Struct,
  Table,
  Utf8,
  vectorFromArray,
  type DataType,
  type Vector,
} from 'apache-arrow';
import type { ChatRecord } from './messages.js';
import type { TrajectoryRow } from './trajectories.js';
import type { Triplet } from './triplets.js';

export type RecordKind = 'triplets' | 'messages' | 'trajectories';

const text = () => new Utf8();
const ids = () => new List(new Field('item', new Int32(), true));
const floats = () => new List(new Field('item', new Float64(), true));
const struct = (fields: Record<string, DataType>) =>
  new Struct(Object.entries(fields).map(([name, type]) => new Field(name, type, true)));

/** The record type of each kind. */
export interface Records {
  triplets: Triplet;
  messages: ChatRecord;
  trajectories: TrajectoryRow;
}

/** Each column: its Arrow type and how a record's value becomes that type's JS value. */
type Columns<R> = Record<string, { type: DataType; value: (record: R) => unknown }>;

const jsonText = (value: unknown) => (value === null || value === undefined ? null : JSON.stringify(value));
const int64 = (value: unknown) => (value === null || value === undefined ? null : BigInt(value as number));

const COLUMNS: { [K in RecordKind]: Columns<Records[K]> } = {
  triplets: {
    prompt: {
      type: struct({ messages: text(), token_ids: ids() }),
      value: (t) => ({ messages: jsonText(t.prompt.messages), token_ids: t.prompt.token_ids }),
    },
    response: {
      type: struct({ message: text(), token_ids: ids(), logprobs: floats() }),
      value: (t) => ({
        message: jsonText(t.response.message),
        token_ids: t.response.token_ids,
        logprobs: t.response.logprobs,
      }),
    },
    reward: { type: new Float64(), value: (t) => t.reward },
    metadata: {
      type: struct({
        rollout_id: text(),
        attempt_id: text(),
        trace_id: text(),
        span_id: text(),
        sequence_id: new Int64(),
        agent_name: text(),
        response_id: text(),
        model: text(),
      }),
      value: (t) => ({ ...t.metadata, sequence_id: int64(t.metadata.sequence_id) }),
    },
  },
  messages: {
    messages: { type: text(), value: (r) => jsonText(r.messages) },
    tools: { type: text(), value: (r) => jsonText(r.tools) },
    parallel_tool_calls: { type: new Bool(), value: (r) => r.parallel_tool_calls ?? null },
  },
  trajectories: {
    rollout_id: { type: text(), value: (r) => r.rollout_id },
    attempt_id: { type: text(), value: (r) => r.attempt_id },
    group_key: { type: text(), value: (r) => r.group_key },
    prompt_ids: { type: ids(), value: (r) => r.prompt_ids },
    response_ids: { type: ids(), value: (r) => r.response_ids },
    response_mask: { type: new List(new Field('item', new Int8(), true)), value: (r) => r.response_mask },
    response_logprobs: { type: floats(), value: (r) => r.response_logprobs },
    reward: { type: new Float64(), value: (r) => r.reward },
    calls: { type: new Int32(), value: (r) => r.calls },
  },
};

/** One record batch of `records` of one kind. */
export function recordBatchOf<K extends RecordKind>(kind: K, records: readonly Records[K][]): RecordBatch {
  const vectors: Record<string, Vector> = {};
  const columns: Columns<Records[K]> = COLUMNS[kind];
  for (const [name, column] of Object.entries(columns)) {
    vectors[name] = vectorFromArray(records.map(column.value), column.type);
  }
  const table = new Table(vectors);
  return table.batches[0] ?? new RecordBatch(table.schema);
}

/** An Arrow Table of records, built in batches of `batchRows`. */
export async function arrowTableOf<K extends RecordKind>(
  kind: K,
  records: AsyncIterable<Records[K]> | Iterable<Records[K]>,
  batchRows = 16_384,
): Promise<Table> {
  const batches: RecordBatch[] = [];
  for await (const batch of inBatches(records, batchRows)) batches.push(recordBatchOf(kind, batch));
  return batches.length > 0 ? new Table(batches) : new Table(recordBatchOf(kind, []).schema);
}

/** Writes records to an Arrow IPC file, a record batch of `batchRows` at a time; returns how many. */
export async function writeArrowFile<K extends RecordKind>(
  kind: K,
  records: AsyncIterable<Records[K]> | Iterable<Records[K]>,
  path: string,
  batchRows = 16_384,
): Promise<number> {
  const writer = new RecordBatchFileWriter();
  const written = pipeline(writer.toNodeStream(), createWriteStream(path));
  let count = 0;
  try {
    for await (const batch of inBatches(records, batchRows)) {
      writer.write(recordBatchOf(kind, batch));
      count += batch.length;
    }
    if (count === 0) writer.write(recordBatchOf(kind, []));
  } finally {
    writer.finish();
  }
  await written;
  return count;
}

async function* inBatches<T>(records: AsyncIterable<T> | Iterable<T>, size: number): AsyncGenerator<T[]> {
  let batch: T[] = [];
  for await (const record of records) {
    batch.push(record);
    if (batch.length === size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}
