/**
 * Column-oriented rows for one table: the storage-neutral batch the OTLP decoders produce and the
 * store appends to DuckDB a data chunk at a time.
 *
 * A column's values live in one of three forms. Text that only DuckDB reads (attributes, names,
 * JSON) is UTF-8 in one buffer with offsets (ByteColumn), and 64-bit times in a BigInt64Array
 * (Int64Column): both are made by the decoders, moved between threads without copying, and
 * copied into DuckDB's vectors without becoming JS values on the writing thread. Columns the
 * store itself reads (ids, sequence numbers) stay plain JS arrays.
 */
export type ColumnType = 'VARCHAR' | 'JSON' | 'INTEGER' | 'BIGINT' | 'DOUBLE' | 'TIMESTAMP_NS';

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
  /** Row i is data[slices[2i], slices[2i + 1]); a repeated value is stored once, its slice reused. */
  readonly data: Uint8Array;
  readonly slices: Uint32Array;
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

/** The buffers to transfer when posting rows to another thread. */
export function transferables(rows: ColumnarRows): ArrayBuffer[] {
  const buffers = new Set<ArrayBuffer>();
  for (const column of rows.columns) {
    if (Array.isArray(column)) continue;
    const c = column as ByteColumn | Int64Column;
    for (const view of c.kind === 'bytes' ? [c.data, c.slices, c.nulls] : [c.values, c.nulls])
      buffers.add(view.buffer as ArrayBuffer);
  }
  return [...buffers];
}

/** The rows at `indexes`, in that order (used to drop re-delivered spans). */
export function selectRows(rows: ColumnarRows, indexes: readonly number[]): ColumnarRows {
  const columns = rows.columns.map((column): ColumnData => {
    if (Array.isArray(column)) return indexes.map((i) => column[i]);
    const c = column as ByteColumn | Int64Column;
    if (c.kind === 'int64') {
      return {
        kind: 'int64',
        values: BigInt64Array.from(indexes, (i) => c.values[i]),
        nulls: Uint8Array.from(indexes, (i) => c.nulls[i]),
      };
    }
    const slices = new Uint32Array(indexes.length * 2);
    for (const [k, i] of indexes.entries()) slices.set(c.slices.subarray(2 * i, 2 * i + 2), 2 * k);
    return { kind: 'bytes', data: c.data, slices, nulls: Uint8Array.from(indexes, (i) => c.nulls[i]) };
  });
  return { length: indexes.length, columns };
}
