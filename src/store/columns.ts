import duckdb from '@duckdb/node-bindings';
import { DuckDBDataChunk, type DuckDBConnection } from '@duckdb/node-api';

/**
 * Column-oriented rows for one table, appended to DuckDB a data chunk at a time.
 *
 * A column's values live in one of three forms. Text that only DuckDB reads (attributes, names,
 * JSON) is UTF-8 in one buffer with offsets (ByteColumn), and 64-bit times in a BigInt64Array
 * (Int64Column): both are made by the decoders, moved between threads without copying, and
 * copied into DuckDB's vectors without becoming JS values on the writing thread. Columns the
 * store itself reads (ids, sequence numbers) stay plain JS arrays.
 */
export type ColumnType = 'VARCHAR' | 'JSON' | 'INTEGER' | 'BIGINT' | 'TIMESTAMP_NS';

export interface Column {
  readonly name: string;
  readonly type: ColumnType;
  readonly notNull?: boolean;
  /** Kept as a JS array because the store reads it (dedup keys, sequence counters). */
  readonly js?: boolean;
}

export type ColumnValue = string | number | bigint | null;

export interface ByteColumn {
  readonly kind: 'bytes';
  /** Row i is data[offsets[i], offsets[i + 1]). */
  readonly data: Uint8Array;
  readonly offsets: Uint32Array;
  /** 1 where the row is NULL. */
  readonly nulls: Uint8Array;
}

export interface Int64Column {
  readonly kind: 'int64';
  readonly values: BigInt64Array;
  readonly nulls: Uint8Array;
}

export type ColumnData = ColumnValue[] | ByteColumn | Int64Column;

/** One column per table column, in the table's column order, all of the same length. */
export interface ColumnarRows {
  readonly length: number;
  readonly columns: readonly ColumnData[];
}

/** Something a decoder pushes one value per row into. */
export interface ColumnBuilder {
  push(value: ColumnValue): void;
}

/**
 * Builds a ByteColumn. `push` adds a whole value; decoders that assemble a value from pieces
 * (JSON text straight from protobuf bytes) use the write* methods and then `endRow`.
 */
export class ByteColumnBuilder implements ColumnBuilder {
  data = Buffer.allocUnsafeSlow(16 * 1024);
  size = 0;
  private readonly offsets: number[] = [0];
  private readonly nulls: number[] = [];

  get rows(): number {
    return this.nulls.length;
  }

  push(value: ColumnValue): void {
    if (value === null) {
      this.nulls.push(1);
    } else {
      const text = value as string;
      this.ensure(text.length * 3);
      this.size += this.data.write(text, this.size, 'utf8');
      this.nulls.push(0);
    }
    this.offsets.push(this.size);
  }

  ensure(extra: number): void {
    if (this.size + extra <= this.data.length) return;
    const bigger = Buffer.allocUnsafeSlow(Math.max(this.data.length * 2, this.size + extra));
    this.data.copy(bigger, 0, 0, this.size);
    this.data = bigger;
  }

  writeByte(byte: number): void {
    this.ensure(1);
    this.data[this.size++] = byte;
  }

  writeBytes(source: Uint8Array, start = 0, end = source.length): void {
    const length = end - start;
    this.ensure(length);
    if (length < 24) {
      const data = this.data;
      let at = this.size;
      for (let i = start; i < end; i++) data[at++] = source[i];
    } else {
      this.data.set(source.subarray(start, end), this.size);
    }
    this.size += length;
  }

  /** ASCII text (numbers, hex, base64, JSON punctuation). */
  writeAscii(text: string): void {
    this.ensure(text.length);
    const data = this.data;
    let at = this.size;
    for (let i = 0; i < text.length; i++) data[at++] = text.charCodeAt(i);
    this.size = at;
  }

  /** UTF-8 bytes as a quoted JSON string, escaping quotes, backslashes and control bytes. */
  writeJsonString(source: Uint8Array, start: number, end: number): void {
    this.ensure(end - start + 2);
    this.data[this.size++] = 0x22;
    let run = start;
    for (let i = start; i < end; i++) {
      const b = source[i];
      if (b >= 0x20 && b !== 0x22 && b !== 0x5c) continue;
      if (i > run) this.writeBytes(source, run, i);
      this.writeAscii(ESCAPES[b] ?? `\\u00${b.toString(16).padStart(2, '0')}`);
      run = i + 1;
    }
    if (end > run) this.writeBytes(source, run, end);
    this.writeByte(0x22);
  }

  /** Ends the row whose bytes were written since the previous row ended. */
  endRow(): void {
    this.nulls.push(0);
    this.offsets.push(this.size);
  }

  /** Drops what was written since the last row ended (a value that turned out invalid). */
  discardPartialRow(): void {
    this.size = this.offsets[this.offsets.length - 1];
  }

  build(): ByteColumn {
    return { kind: 'bytes', data: this.data.subarray(0, this.size), offsets: Uint32Array.from(this.offsets), nulls: Uint8Array.from(this.nulls) };
  }
}

const ESCAPES: Record<number, string> = { 0x22: '\\"', 0x5c: '\\\\', 0x0a: '\\n', 0x0d: '\\r', 0x09: '\\t', 0x08: '\\b', 0x0c: '\\f' };

export class Int64ColumnBuilder implements ColumnBuilder {
  private bytes = new Uint8Array(8 * 1024);
  private count = 0;
  private readonly nulls: number[] = [];

  push(value: ColumnValue): void {
    this.reserve();
    if (value === null) this.nulls.push(1);
    else {
      new DataView(this.bytes.buffer).setBigInt64(this.count * 8, value as bigint, true);
      this.nulls.push(0);
    }
    this.count++;
  }

  /**
   * Copies a little-endian fixed64 from `source` at `at` without making a BigInt. OTLP's 0
   * means "not set" and values past int64 cannot be times: both become NULL.
   */
  pushFixed64(source: Uint8Array, at: number): void {
    this.reserve();
    let zero = true;
    for (let i = 0; i < 8; i++) if ((this.bytes[this.count * 8 + i] = source[at + i]) !== 0) zero = false;
    this.nulls.push(zero || source[at + 7] >= 0x80 ? 1 : 0);
    this.count++;
  }

  build(): Int64Column {
    const values = new BigInt64Array(this.count);
    new Uint8Array(values.buffer).set(this.bytes.subarray(0, this.count * 8));
    return { kind: 'int64', values, nulls: Uint8Array.from(this.nulls) };
  }

  private reserve(): void {
    if ((this.count + 1) * 8 <= this.bytes.length) return;
    const bigger = new Uint8Array(this.bytes.length * 2);
    bigger.set(this.bytes);
    this.bytes = bigger;
  }
}

/** Builders for every column of a table, each in the form `ColumnData` describes. */
export function columnBuilders(columns: readonly Column[]): ColumnBuilder[] {
  return columns.map((c) => {
    if (c.js) return [] as ColumnValue[];
    if (c.type === 'VARCHAR' || c.type === 'JSON') return new ByteColumnBuilder();
    if (c.type === 'TIMESTAMP_NS') return new Int64ColumnBuilder();
    return [] as ColumnValue[];
  });
}

export function buildColumns(builders: readonly ColumnBuilder[]): ColumnData[] {
  return builders.map((b) => (Array.isArray(b) ? (b as ColumnValue[]) : (b as ByteColumnBuilder | Int64ColumnBuilder).build()));
}

/** The buffers to transfer when posting rows to another thread. */
export function transferables(rows: ColumnarRows): ArrayBuffer[] {
  const buffers = new Set<ArrayBuffer>();
  for (const column of rows.columns) {
    if (Array.isArray(column)) continue;
    const c = column as ByteColumn | Int64Column;
    for (const view of c.kind === 'bytes' ? [c.data, c.offsets, c.nulls] : [c.values, c.nulls]) buffers.add(view.buffer as ArrayBuffer);
  }
  return [...buffers];
}

/** The rows at `indexes`, in that order (used to drop re-delivered spans). */
export function selectRows(rows: ColumnarRows, indexes: readonly number[]): ColumnarRows {
  const columns = rows.columns.map((column): ColumnData => {
    if (Array.isArray(column)) return indexes.map((i) => column[i]);
    const c = column as ByteColumn | Int64Column;
    if (c.kind === 'int64') {
      return { kind: 'int64', values: BigInt64Array.from(indexes, (i) => c.values[i]), nulls: Uint8Array.from(indexes, (i) => c.nulls[i]) };
    }
    const builder = new ByteColumnBuilder();
    for (const i of indexes) builder.push(c.nulls[i] ? null : Buffer.from(c.data.buffer, c.data.byteOffset + c.offsets[i], c.offsets[i + 1] - c.offsets[i]).toString('utf8'));
    return builder.build();
  });
  return { length: indexes.length, columns };
}

export function columnsDdl(table: string, columns: readonly Column[]): string {
  const defs = columns.map((c) => `  ${c.name} ${c.type}${c.notNull ? ' NOT NULL' : ''}`);
  return `CREATE TABLE ${table} (\n${defs.join(',\n')}\n)`;
}

const CHUNK_ROWS = duckdb.vector_size();

/**
 * Appends `rows` to `table` through DuckDB's appender, filling data chunks directly: fixed-width
 * values are written into the vectors' memory and strings assigned element by element, which is
 * the fastest path the Node client offers (the per-value appender API is about 1.5x slower).
 * The appender joins the connection's open transaction, so a caller that began one decides when
 * the rows become durable.
 */
export async function appendRows(
  connection: DuckDBConnection,
  table: string,
  columns: readonly Column[],
  batches: readonly ColumnarRows[],
): Promise<void> {
  const appender = await connection.createAppender(table);
  try {
    const types = columns.map((_, i) => appender.columnType(i));
    const chunk = DuckDBDataChunk.create(types);
    for (const rows of batches) {
      for (let start = 0; start < rows.length; start += CHUNK_ROWS) {
        const count = Math.min(CHUNK_ROWS, rows.length - start);
        chunk.reset();
        for (let c = 0; c < columns.length; c++) {
          fillVector(duckdb.data_chunk_get_vector(chunk.chunk, c), columns[c].type, rows.columns[c], start, count);
        }
        chunk.rowCount = count;
        appender.appendDataChunk(chunk);
      }
    }
    appender.flushSync();
  } finally {
    appender.closeSync();
  }
}

// Scratch buffers reused for every chunk: DuckDB copies them into its vectors.
const validityBytes = new Uint8Array(CHUNK_ROWS / 8);
const fixedWidth = new ArrayBuffer(CHUNK_ROWS * 8);

function fillVector(vector: duckdb.Vector, type: ColumnType, column: ColumnData, start: number, count: number): void {
  validityBytes.fill(0xff);
  let nulls = 0;
  const setNull = (row: number) => {
    validityBytes[row >> 3] &= ~(1 << (row & 7));
    nulls++;
  };
  if (!Array.isArray(column)) {
    const c = column as ByteColumn | Int64Column;
    for (let row = 0; row < count; row++) if (c.nulls[start + row]) setNull(row);
    if (c.kind === 'int64') {
      duckdb.copy_data_to_vector(vector, 0, c.values.buffer as ArrayBuffer, c.values.byteOffset + start * 8, count * 8);
    } else {
      const { data, offsets } = c;
      for (let row = 0; row < count; row++) {
        const i = start + row;
        if (!c.nulls[i]) duckdb.vector_assign_string_element_len(vector, row, data.subarray(offsets[i], offsets[i + 1]));
      }
    }
  } else {
    const values = column as ColumnValue[];
    switch (type) {
      case 'VARCHAR':
      case 'JSON':
        for (let row = 0; row < count; row++) {
          const value = values[start + row];
          if (value === null || value === undefined) setNull(row);
          else duckdb.vector_assign_string_element(vector, row, value as string);
        }
        break;
      case 'INTEGER': {
        const ints = new Int32Array(fixedWidth, 0, count);
        for (let row = 0; row < count; row++) {
          const value = values[start + row];
          if (value === null || value === undefined) setNull(row);
          else ints[row] = value as number;
        }
        duckdb.copy_data_to_vector(vector, 0, fixedWidth, 0, count * 4);
        break;
      }
      case 'BIGINT':
      case 'TIMESTAMP_NS': {
        const longs = new BigInt64Array(fixedWidth, 0, count);
        for (let row = 0; row < count; row++) {
          const value = values[start + row];
          if (value === null || value === undefined) setNull(row);
          else longs[row] = typeof value === 'bigint' ? value : BigInt(value);
        }
        duckdb.copy_data_to_vector(vector, 0, fixedWidth, 0, count * 8);
        break;
      }
    }
  }
  if (nulls > 0) {
    duckdb.vector_ensure_validity_writable(vector);
    duckdb.copy_data_to_vector_validity(vector, 0, validityBytes.buffer, 0, Math.ceil(count / 64) * 8);
  }
}
