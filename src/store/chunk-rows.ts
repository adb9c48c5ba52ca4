import duckdb from '@duckdb/node-bindings';
import { type DuckDBDataChunk, type DuckDBType, DuckDBTypeId, JsonDuckDBValueConverter } from '@duckdb/node-api';

/**
 * A data chunk's rows as objects, each value as DuckDB's JSON conversion gives it, but lists of
 * numbers (token ids, logprobs) read straight from the vectors' memory: the conversion makes a
 * list value, a sliced copy of the child vector, an array and a converted copy per row, and tests
 * each element's validity with BigInt arithmetic. That was most of the time a GRPO batch of 1,024
 * rows of 2,000 tokens took to read (about 3 s of CPU for 11 million values). With `typedLists`,
 * such a list is a view of one copy of the chunk's child vector, not a JS array: copying numbers
 * into arrays (doubles each boxed) and collecting them was most of the rest.
 */

type NumberArray =
  | Int8Array
  | Int16Array
  | Int32Array
  | Uint8Array
  | Uint16Array
  | Uint32Array
  | Float32Array
  | Float64Array;

/** The typed array of each list element type read as numbers (the JSON conversion gives them as numbers too). */
const NUMBER_ELEMENTS = new Map<
  DuckDBTypeId,
  { new (buffer: ArrayBufferLike, offset: number, length: number): NumberArray; BYTES_PER_ELEMENT: number }
>([
  [DuckDBTypeId.TINYINT, Int8Array],
  [DuckDBTypeId.SMALLINT, Int16Array],
  [DuckDBTypeId.INTEGER, Int32Array],
  [DuckDBTypeId.UTINYINT, Uint8Array],
  [DuckDBTypeId.USMALLINT, Uint16Array],
  [DuckDBTypeId.UINTEGER, Uint32Array],
  [DuckDBTypeId.FLOAT, Float32Array],
  [DuckDBTypeId.DOUBLE, Float64Array],
]);

/** The element array type of a list of numbers, else undefined. */
const numberListElements = (type: DuckDBType) =>
  type.typeId === DuckDBTypeId.LIST
    ? NUMBER_ELEMENTS.get((type as unknown as { valueType: DuckDBType }).valueType.typeId)
    : undefined;

/** Whether row `i` of a vector is valid, from its validity mask (null: all are). */
const isValid = (mask: Uint8Array | null, i: number) => mask === null || (mask[i >> 3] & (1 << (i & 7))) !== 0;

/**
 * Each row's list of numbers (null for a null list or element; NaN and infinities as text, as JSON
 * gives them); with `typed`, a list without null elements is a typed array (NaN as NaN).
 */
function numberLists(
  chunk: DuckDBDataChunk,
  column: number,
  Values: NonNullable<ReturnType<typeof numberListElements>>,
  typed: boolean,
): (ArrayLike<unknown> | null)[] {
  const rowCount = chunk.rowCount;
  const vector = duckdb.data_chunk_get_vector(chunk.chunk, column);
  const entryBytes = duckdb.vector_get_data(vector, rowCount * 16);
  // duckdb_list_entry: offset and length, two uint64 per row.
  const entries = new BigUint64Array(entryBytes.buffer, entryBytes.byteOffset, rowCount * 2);
  const validity = duckdb.vector_get_validity(vector, Math.ceil(rowCount / 64) * 8);
  const child = duckdb.list_vector_get_child(vector);
  const childSize = duckdb.list_vector_get_size(vector);
  const data = duckdb.vector_get_data(child, childSize * Values.BYTES_PER_ELEMENT);
  const inChunk = new Values(data.buffer, data.byteOffset, childSize);
  // The chunk's memory is DuckDB's, freed with the chunk: typed lists view a copy.
  const values = typed ? inChunk.slice() : inChunk;
  const childValidity = duckdb.vector_get_validity(child, Math.ceil(childSize / 64) * 8);
  const lists: (ArrayLike<unknown> | null)[] = new Array(rowCount);
  for (let row = 0; row < rowCount; row++) {
    if (!isValid(validity, row)) {
      lists[row] = null;
      continue;
    }
    const offset = Number(entries[row * 2]);
    const end = offset + Number(entries[row * 2 + 1]);
    lists[row] =
      childValidity !== null
        ? withNulls(values, childValidity, offset, end)
        : typed
          ? values.subarray(offset, end)
          : numbers(values, offset, end);
  }
  return lists;
}

const isFloats = (values: NumberArray) => values instanceof Float32Array || values instanceof Float64Array;

/** The values from `offset` to `end`, none null (non-finite floats as text). A plain loop: Array.from is 10 times slower. */
function numbers(values: NumberArray, offset: number, end: number): unknown[] {
  const list: unknown[] = new Array(end - offset);
  for (let i = offset; i < end; i++) list[i - offset] = values[i];
  if (isFloats(values)) for (let i = 0; i < list.length; i++) if (!Number.isFinite(list[i])) list[i] = String(list[i]);
  return list;
}

/** The values from `offset` to `end`, some null. */
function withNulls(values: NumberArray, validity: Uint8Array, offset: number, end: number): unknown[] {
  const list: unknown[] = [];
  for (let i = offset; i < end; i++) {
    const value = values[i];
    list.push(!isValid(validity, i) ? null : isFloats(values) && !Number.isFinite(value) ? String(value) : value);
  }
  return list;
}

/** The chunk's rows as objects keyed by `names` (the result's column names, deduplicated), of `types`. */
export function chunkRows(
  chunk: DuckDBDataChunk,
  names: readonly string[],
  types: readonly DuckDBType[],
  typedLists: boolean,
): Record<string, unknown>[] {
  const rowCount = chunk.rowCount;
  const rows: Record<string, unknown>[] = Array.from({ length: rowCount }, () => ({}));
  for (let column = 0; column < names.length; column++) {
    const Values = numberListElements(types[column]);
    const values = Values
      ? numberLists(chunk, column, Values, typedLists)
      : chunk.convertColumnValues(column, JsonDuckDBValueConverter);
    const name = names[column];
    for (let row = 0; row < rowCount; row++) rows[row][name] = values[row];
  }
  return rows;
}
