import duckdb from '@duckdb/node-bindings';
import { DuckDBDataChunk, type DuckDBConnection } from '@duckdb/node-api';

/**
 * Column-oriented rows for one table, appended to DuckDB a data chunk at a time. Values of a
 * column: VARCHAR and JSON take strings, INTEGER and BIGINT numbers, TIMESTAMP_NS bigints
 * (nanoseconds since the epoch); null is SQL NULL.
 */
export type ColumnType = 'VARCHAR' | 'JSON' | 'INTEGER' | 'BIGINT' | 'TIMESTAMP_NS';

export interface Column {
  readonly name: string;
  readonly type: ColumnType;
  readonly notNull?: boolean;
}

export type ColumnValue = string | number | bigint | null;

/** One array per column, in the table's column order, all of the same length. */
export interface ColumnarRows {
  readonly length: number;
  readonly columns: readonly (readonly ColumnValue[])[];
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

function fillVector(vector: duckdb.Vector, type: ColumnType, values: readonly ColumnValue[], start: number, count: number): void {
  validityBytes.fill(0xff);
  let nulls = 0;
  const setNull = (row: number) => {
    validityBytes[row >> 3] &= ~(1 << (row & 7));
    nulls++;
  };
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
  if (nulls > 0) {
    duckdb.vector_ensure_validity_writable(vector);
    duckdb.copy_data_to_vector_validity(vector, 0, validityBytes.buffer, 0, Math.ceil(count / 64) * 8);
  }
}
