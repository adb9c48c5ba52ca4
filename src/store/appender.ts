import duckdb from '@duckdb/node-bindings';
import { DuckDBDataChunk, type DuckDBAppender, type DuckDBConnection } from '@duckdb/node-api';
import type {
  ByteColumn,
  Column,
  ColumnarRows,
  ColumnData,
  ColumnType,
  ColumnValue,
  Int64Column,
} from '../otlp/columns.js';

export function columnsDdl(table: string, columns: readonly Column[]): string {
  const defs = columns.map((c) => `  ${c.name} ${c.type}${c.notNull ? ' NOT NULL' : ''}`);
  return `CREATE TABLE ${table} (\n${defs.join(',\n')}\n)`;
}

const CHUNK_ROWS = duckdb.vector_size();

/** A column the appender numbers (TableAppender.create): the query gives the first number. */
export interface CounterColumn {
  readonly nextSql: string;
}

/**
 * Appends rows to one table through DuckDB's appender, filling data chunks directly:
 * fixed-width values and strings are copied into the vectors a column at a time, the fastest path
 * the Node client offers (the per-value appender API is about 1.5x slower). One appender per table
 * lives as long as the writer, so a commit costs no appender set-up. Rows are added to the
 * appender's buffer (`add`, which needs no transaction) and flushed into the connection's open
 * transaction (`flush`); the caller's COMMIT makes them durable.
 */
export class TableAppender {
  /** Per column: its validity bits for the chunk being filled, and whether any row is null. */
  private readonly validity: Uint8Array[];
  private readonly hasNulls: boolean[];
  /** Rows in the chunk being filled. */
  private filled = 0;
  private pending = 0;

  private constructor(
    private readonly appender: DuckDBAppender,
    private readonly columns: readonly Column[],
    private readonly chunk: DuckDBDataChunk,
    /** The next value of the table's counter column (see `create`), null without one. */
    private nextCount: bigint | null,
  ) {
    this.validity = columns.map(() => new Uint8Array(CHUNK_ROWS / 8).fill(0xff));
    this.hasNulls = columns.map(() => false);
  }

  /**
   * With a `counter`, the table has one BIGINT column after `columns`, its last, that the
   * appender fills with consecutive numbers in the order rows are added, from the one the
   * counter's query gives. One writer adds rows in commit order, so the counter grows with the
   * commits: `commit_seq` of `spans`, which unlike rowid keeps its value when earlier rows are
   * deleted. A group that fails leaves a gap, never a repeat.
   */
  static async create(
    connection: DuckDBConnection,
    table: string,
    columns: readonly Column[],
    counter?: CounterColumn,
  ): Promise<TableAppender> {
    const appender = await connection.createAppender(table);
    const width = columns.length + (counter === undefined ? 0 : 1);
    if (appender.columnCount !== width)
      throw new Error(`table ${table} has ${appender.columnCount} columns, the appender fills ${width}`);
    const chunk = DuckDBDataChunk.create(Array.from({ length: width }, (_, i) => appender.columnType(i)));
    let next: bigint | null = null;
    if (counter !== undefined)
      next = BigInt((await connection.runAndReadAll(counter.nextSql)).getRows()[0][0] as bigint);
    return new TableAppender(appender, columns, chunk, next);
  }

  /** Rows added since the last flush. */
  get pendingRows(): number {
    return this.pending;
  }

  /** Adds the batches and flushes everything added into the open transaction. */
  append(batches: readonly ColumnarRows[]): void {
    this.add(batches);
    this.flush();
  }

  /**
   * Adds the batches to the appender's buffer. Small batches (a request of two spans, one state
   * change) share data chunks, also across calls: a chunk costs about as much to fill and append
   * as its rows. A large batch gets chunks of its own, where a value that repeats in every row
   * (resource, scope, service) is stored once. On failure everything added since the last flush
   * is dropped.
   */
  add(batches: readonly ColumnarRows[]): void {
    const { columns, chunk } = this;
    try {
      for (const rows of batches) {
        const own = rows.length >= OWN_CHUNK_ROWS;
        if (own) this.appendChunk();
        for (let start = 0; start < rows.length; ) {
          const count = Math.min(CHUNK_ROWS - this.filled, rows.length - start);
          for (let c = 0; c < columns.length; c++) {
            const vector = duckdb.data_chunk_get_vector(chunk.chunk, c);
            if (fillVector(vector, columns[c].type, rows.columns[c], start, count, this.filled, this.validity[c], own))
              this.hasNulls[c] = true;
          }
          if (this.nextCount !== null) this.fillCounter(count);
          this.filled += count;
          start += count;
          if (own || this.filled === CHUNK_ROWS) this.appendChunk();
        }
        this.pending += rows.length;
      }
    } catch (error) {
      this.clear();
      throw error;
    }
  }

  /** Numbers `count` rows from the chunk's fill position in the counter column. */
  private fillCounter(count: number): void {
    const vector = duckdb.data_chunk_get_vector(this.chunk.chunk, this.columns.length);
    const values = new BigInt64Array(fixedWidth, 0, count);
    let next = this.nextCount as bigint;
    for (let row = 0; row < count; row++) values[row] = next++;
    this.nextCount = next;
    duckdb.copy_data_to_vector(vector, this.filled * 8, fixedWidth, 0, count * 8);
  }

  /** Flushes the rows added into the connection's open transaction. */
  flush(): void {
    if (this.pending === 0) return;
    try {
      this.appendChunk();
      this.appender.flushSync();
      this.pending = 0;
    } catch (error) {
      this.clear();
      throw error;
    }
  }

  /** Drops the rows added since the last flush. */
  clear(): void {
    this.chunk.reset();
    for (const bits of this.validity) bits.fill(0xff);
    this.hasNulls.fill(false);
    this.filled = 0;
    this.pending = 0;
    this.appender.clear();
  }

  private appendChunk(): void {
    const { columns, chunk, filled } = this;
    if (filled === 0) return;
    for (let c = 0; c < columns.length; c++) {
      if (!this.hasNulls[c]) continue;
      const vector = duckdb.data_chunk_get_vector(chunk.chunk, c);
      duckdb.vector_ensure_validity_writable(vector);
      duckdb.copy_data_to_vector_validity(
        vector,
        0,
        this.validity[c].buffer as ArrayBuffer,
        0,
        Math.ceil(filled / 64) * 8,
      );
      this.validity[c].fill(0xff);
      this.hasNulls[c] = false;
    }
    chunk.rowCount = filled;
    this.appender.appendDataChunk(chunk);
    chunk.reset();
    this.filled = 0;
  }

  close(): void {
    this.appender.closeSync();
  }
}

/** Batches of at least this many rows fill data chunks of their own. */
const OWN_CHUNK_ROWS = 256;

// A scratch buffer reused for every fixed-width column: DuckDB copies it into its vectors.
const fixedWidth = new ArrayBuffer(CHUNK_ROWS * 8);

/** The rows a fill marks null in a vector's validity mask (one bit cleared per row), counted. */
class NullRows {
  count = 0;

  constructor(
    private readonly validity: Uint8Array,
    private readonly offset: number,
  ) {}

  readonly set = (row: number): void => {
    const at = this.offset + row;
    this.validity[at >> 3] &= ~(1 << (at & 7));
    this.count++;
  };
}

/**
 * Writes `count` rows of `column` from `start` into `vector` at row `offset`, marking null rows
 * in `validity`; returns whether there were any. With `alone` (the vector holds these rows only)
 * a value repeated in every row is stored once, as a constant vector.
 */
function fillVector(
  vector: duckdb.Vector,
  type: ColumnType,
  column: ColumnData,
  start: number,
  count: number,
  offset: number,
  validity: Uint8Array,
  alone: boolean,
): boolean {
  const nulls = new NullRows(validity, offset);
  if (Array.isArray(column)) fillFromValues(vector, type, column as ColumnValue[], start, count, offset, nulls, alone);
  else fillFromPacked(vector, column as ByteColumn | Int64Column, start, count, offset, nulls, alone);
  return nulls.count > 0;
}

/** fillVector for a column the decoders packed: UTF-8 bytes with slices, or int64 values. */
function fillFromPacked(
  vector: duckdb.Vector,
  c: ByteColumn | Int64Column,
  start: number,
  count: number,
  offset: number,
  nulls: NullRows,
  alone: boolean,
): void {
  for (let row = 0; row < count; row++) if (c.nulls[start + row]) nulls.set(row);
  if (c.kind === 'int64') {
    duckdb.copy_data_to_vector(
      vector,
      offset * 8,
      c.values.buffer as ArrayBuffer,
      c.values.byteOffset + start * 8,
      count * 8,
    );
    return;
  }
  const { data, slices } = c;
  if (alone && nulls.count === 0 && isConstantSlice(slices, start, count)) {
    // Resource, scope and service repeat for every span of a request: one value, not one per row.
    const text = Buffer.from(
      data.buffer,
      data.byteOffset + slices[2 * start],
      slices[2 * start + 1] - slices[2 * start],
    ).toString('utf8');
    duckdb.vector_reference_value(vector, duckdb.create_varchar(text));
    return;
  }
  assignStrings(vector, c, start, count, offset);
}

/** fillVector for a column of JS values, by its SQL type. */
function fillFromValues(
  vector: duckdb.Vector,
  type: ColumnType,
  values: ColumnValue[],
  start: number,
  count: number,
  offset: number,
  nulls: NullRows,
  alone: boolean,
): void {
  switch (type) {
    case 'VARCHAR':
    case 'JSON':
      if (alone && isConstant(values, start, count)) {
        const value = values[start];
        if (value !== null && value !== undefined) {
          duckdb.vector_reference_value(vector, duckdb.create_varchar(value as string));
          return;
        }
      }
      assignStrings(vector, encodeStrings(values, start, count, nulls.set), 0, count, offset);
      break;
    case 'INTEGER': {
      const ints = new Int32Array(fixedWidth, 0, count);
      for (let row = 0; row < count; row++) {
        const value = values[start + row];
        if (value === null || value === undefined) nulls.set(row);
        else ints[row] = value as number;
      }
      duckdb.copy_data_to_vector(vector, offset * 4, fixedWidth, 0, count * 4);
      break;
    }
    case 'DOUBLE': {
      const doubles = new Float64Array(fixedWidth, 0, count);
      for (let row = 0; row < count; row++) {
        const value = values[start + row];
        if (value === null || value === undefined) nulls.set(row);
        else doubles[row] = Number(value);
      }
      duckdb.copy_data_to_vector(vector, offset * 8, fixedWidth, 0, count * 8);
      break;
    }
    case 'BIGINT':
    case 'TIMESTAMP_NS': {
      const longs = new BigInt64Array(fixedWidth, 0, count);
      for (let row = 0; row < count; row++) {
        const value = values[start + row];
        if (value === null || value === undefined) nulls.set(row);
        else longs[row] = typeof value === 'bigint' ? value : BigInt(value);
      }
      duckdb.copy_data_to_vector(vector, offset * 8, fixedWidth, 0, count * 8);
      break;
    }
  }
}

/**
 * Writes rows `start` to `start + count` of `column` as DuckDB's 16-byte `duckdb_string_t`s
 * (duckdb.h), copied into the vector in one call. A string of at most 12 bytes is inlined: a
 * little-endian uint32 length, then the bytes, zero-padded. A longer one is its length, its first
 * 4 bytes and a pointer: the bytes of all long ones are handed to DuckDB as one string (assigned to
 * the first row, so that they live in the vector's string heap until the chunk is reset) and each
 * row points into it. One N-API call per column instead of one per long value (0.5 us each: ids
 * and attributes are most of a span's strings). The decoders checked that the bytes are UTF-8
 * (protobuf-decoder.ts); DuckDB checks again when it commits them (its string statistics).
 */
function assignStrings(
  vector: duckdb.Vector,
  column: Omit<ByteColumn, 'kind'>,
  start: number,
  count: number,
  offset: number,
): void {
  const { data, slices, nulls } = column;
  structs.fill(0, 0, count * 16);
  let long = 0;
  let from = Infinity;
  let end = 0;
  for (let row = 0; row < count; row++) {
    const i = start + row;
    if (nulls[i]) continue;
    const at = slices[2 * i];
    const length = slices[2 * i + 1] - at;
    structsView.setUint32(row * 16, length, true);
    if (length > 12) {
      longRows[long++] = row;
      if (at < from) from = at;
      if (at + length > end) end = at + length;
      continue;
    }
    for (let k = 0; k < length; k++) structs[row * 16 + 4 + k] = data[at + k];
  }
  if (long > 0) {
    duckdb.vector_assign_string_element_len(vector, offset, data.subarray(from, end));
    const vectorData = duckdb.vector_get_data(vector, (offset + 1) * 16);
    const pointer = new DataView(vectorData.buffer, vectorData.byteOffset, vectorData.byteLength);
    const low = pointer.getUint32(offset * 16 + 8, true);
    const high = pointer.getUint32(offset * 16 + 12, true);
    for (let k = 0; k < long; k++) {
      const row = longRows[k];
      const at = slices[2 * (start + row)];
      for (let b = 0; b < 4; b++) structs[row * 16 + 4 + b] = data[at + b];
      const address = low + (at - from);
      structsView.setUint32(row * 16 + 8, address >>> 0, true);
      structsView.setUint32(row * 16 + 12, high + (address >= 2 ** 32 ? 1 : 0), true);
    }
  }
  duckdb.copy_data_to_vector(vector, offset * 16, structs.buffer as ArrayBuffer, 0, count * 16);
}

/** `count` JS strings from `start` as UTF-8 in a scratch buffer, for assignStrings (rows from 0). */
function encodeStrings(
  values: readonly ColumnValue[],
  start: number,
  count: number,
  setNull: (row: number) => void,
): Omit<ByteColumn, 'kind'> {
  let units = 0;
  for (let row = 0; row < count; row++) units += (values[start + row] as string | null)?.length ?? 0;
  if (units * 3 > scratch.data.length) scratch.data = Buffer.allocUnsafe(units * 3);
  let size = 0;
  for (let row = 0; row < count; row++) {
    const value = values[start + row];
    scratch.slices[2 * row] = size;
    if (value === null || value === undefined) {
      scratch.nulls[row] = 1;
      setNull(row);
    } else {
      scratch.nulls[row] = 0;
      size += scratch.data.write(value as string, size, 'utf8');
    }
    scratch.slices[2 * row + 1] = size;
  }
  return scratch;
}

const structs = new Uint8Array(CHUNK_ROWS * 16);
const structsView = new DataView(structs.buffer);
const longRows = new Uint32Array(CHUNK_ROWS);
const scratch = {
  data: Buffer.allocUnsafe(CHUNK_ROWS * 64),
  slices: new Uint32Array(CHUNK_ROWS * 2),
  nulls: new Uint8Array(CHUNK_ROWS),
};

function isConstantSlice(slices: Uint32Array, start: number, count: number): boolean {
  const first = slices[2 * start];
  const end = slices[2 * start + 1];
  for (let i = start + 1; i < start + count; i++)
    if (slices[2 * i] !== first || slices[2 * i + 1] !== end) return false;
  return true;
}

function isConstant(values: readonly ColumnValue[], start: number, count: number): boolean {
  const first = values[start];
  for (let i = start + 1; i < start + count; i++) if (values[i] !== first) return false;
  return true;
}
