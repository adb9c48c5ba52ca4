import {
  Field,
  Float32,
  Int32,
  Int8,
  List,
  makeData,
  RecordBatch,
  Schema,
  Struct,
  Table,
  tableToIPC,
  Utf8,
  vectorFromArray,
  type Data,
} from 'apache-arrow';
import type { BatchRow } from './batch.js';
import type { Estimator } from './options.js';

/**
 * A training batch as the trainer gets it: one Arrow IPC stream of the columns of
 * docs/training.md (the hand-off contract), its identity in the schema's metadata. Token lists
 * are the rows' typed arrays laid end to end: a batch of 1,024 rows holds millions of tokens.
 */

export interface TrainingBatch {
  readonly batchId: string;
  readonly step: number;
  /** The newest model version among the rows. */
  readonly modelVersion: string;
  readonly estimator: Estimator;
  readonly aggregation: 'transition' | 'trajectory';
  readonly rows: readonly BatchRow[];
  /** Per row, in order; null with estimator none. */
  readonly advantages: readonly (number | null)[];
  /** The run's settings a trainer must agree with, checked at each batch (agl_trainer.trl). */
  readonly settings: BatchSettings;
}

export interface BatchSettings {
  readonly steps: number;
  readonly batchSize: number;
  readonly groupSize: number;
  /** The llm's sampling temperature, when its sampling parameters set one. */
  readonly temperature?: number;
}

/** The `agl.*` keys of the schema (and of Parquet's key-value metadata). */
export function batchMetadata(batch: TrainingBatch): Record<string, string> {
  return {
    'agl.batch_id': batch.batchId,
    'agl.step': String(batch.step),
    'agl.model_version': batch.modelVersion,
    'agl.estimator': batch.estimator,
    'agl.aggregation': batch.aggregation,
    'agl.steps': String(batch.settings.steps),
    'agl.batch_size': String(batch.settings.batchSize),
    'agl.group_size': String(batch.settings.groupSize),
    ...(batch.settings.temperature === undefined ? {} : { 'agl.temperature': String(batch.settings.temperature) }),
  };
}

/** Typed lists laid end to end in one typed array of their kind, and their offsets. */
function laidEnd<L extends Int32Array | Int8Array | Float32Array>(
  lists: readonly L[],
  Values: new (length: number) => L,
): { offsets: Int32Array; values: L } {
  const offsets = new Int32Array(lists.length + 1);
  for (let i = 0; i < lists.length; i++) offsets[i + 1] = offsets[i] + lists[i].length;
  const values = new Values(offsets[lists.length]);
  for (let i = 0; i < lists.length; i++) values.set(lists[i], offsets[i]);
  return { offsets, values };
}

/** A list column of `child`'s values at `offsets`. */
const listData = (offsets: Int32Array, child: Data<Int32 | Int8 | Float32>): Data =>
  makeData({
    type: new List(new Field('item', child.type, true)),
    length: offsets.length - 1,
    nullCount: 0,
    valueOffsets: offsets,
    child,
  });

function int32Lists(lists: readonly Int32Array[]): Data {
  const { offsets, values } = laidEnd(lists, Int32Array);
  return listData(offsets, makeData({ type: new Int32(), length: values.length, nullCount: 0, data: values }));
}

function int8Lists(lists: readonly Int8Array[]): Data {
  const { offsets, values } = laidEnd(lists, Int8Array);
  return listData(offsets, makeData({ type: new Int8(), length: values.length, nullCount: 0, data: values }));
}

function float32Lists(lists: readonly Float32Array[]): Data {
  const { offsets, values } = laidEnd(lists, Float32Array);
  return listData(offsets, makeData({ type: new Float32(), length: values.length, nullCount: 0, data: values }));
}

/** The batch's rows as one Arrow record batch, its metadata in the schema. */
function batchRecords(batch: TrainingBatch): RecordBatch {
  const { rows } = batch;
  const text = (value: (row: BatchRow) => string) => vectorFromArray(rows.map(value), new Utf8()).data[0];
  const columns: [string, Data, boolean][] = [
    [
      'batch_id',
      vectorFromArray(
        rows.map(() => batch.batchId),
        new Utf8(),
      ).data[0],
      false,
    ],
    [
      'step',
      vectorFromArray(
        rows.map(() => batch.step),
        new Int32(),
      ).data[0],
      false,
    ],
    ['group_id', text((r) => r.groupId), false],
    ['rollout_id', text((r) => r.rolloutId), false],
    ['attempt_id', text((r) => r.attemptId), false],
    ['model_version', text((r) => r.modelVersion), false],
    ['prompt_ids', int32Lists(rows.map((r) => r.promptIds)), false],
    ['response_ids', int32Lists(rows.map((r) => r.responseIds)), false],
    ['response_mask', int8Lists(rows.map((r) => r.responseMask)), false],
    ['response_logprobs', float32Lists(rows.map((r) => r.responseLogprobs)), false],
    [
      'reward',
      vectorFromArray(
        rows.map((r) => r.reward),
        new Float32(),
      ).data[0],
      false,
    ],
    ['advantage', vectorFromArray(batch.advantages, new Float32()).data[0], true],
  ];
  const fields = columns.map(([name, data, nullable]) => new Field(name, data.type, nullable));
  const schema = new Schema(fields, new Map(Object.entries(batchMetadata(batch))));
  const data = makeData({
    type: new Struct(fields),
    length: rows.length,
    nullCount: 0,
    children: columns.map(([, column]) => column),
  });
  return new RecordBatch(schema, data);
}

/** The batch as an Arrow IPC stream: what GET /v1/agl/training/batches/next answers. */
export function arrowStream(batch: TrainingBatch): Uint8Array {
  return tableToIPC(new Table([batchRecords(batch)]), 'stream');
}
