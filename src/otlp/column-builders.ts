import { isUtf8 } from 'node:buffer';
import type { ByteColumn, Column, ColumnData, ColumnValue, Int64Column } from './columns.js';

/** Something a decoder pushes one value per row into. */
export interface ColumnBuilder {
  push(value: ColumnValue): void;
}

/**
 * Builds a ByteColumn. `push` adds a whole value (a value equal to the previous row's is stored
 * once); decoders that assemble a value from pieces (JSON text straight from protobuf bytes)
 * use the write* methods and then `endRow`.
 */
export class ByteColumnBuilder implements ColumnBuilder {
  data: Buffer;
  size = 0;
  private slices: Uint32Array;
  private nulls: Uint8Array;
  private rows = 0;
  /** Where the row being written started. */
  private rowStart = 0;
  private previous: string | Uint8Array | null = null;

  constructor() {
    this.data = Buffer.allocUnsafeSlow(1024);
    this.slices = new Uint32Array(64);
    this.nulls = new Uint8Array(32);
  }

  push(value: ColumnValue): void {
    if (value === null) {
      this.endNullRow();
    } else if (value === this.previous && this.rows > 0) {
      this.repeatRow();
    } else {
      const text = value as string;
      this.ensure(text.length * 3);
      this.size += this.data.write(text, this.size, 'utf8');
      this.endRow();
      this.previous = text;
    }
  }

  /** Adds `bytes` as a row; the same Buffer pushed again is stored once. */
  pushBytes(bytes: Uint8Array): void {
    if (bytes === this.previous && this.rows > 0) {
      this.repeatRow();
      return;
    }
    this.writeBytes(bytes);
    this.endRow();
    this.previous = bytes;
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
    if (length >= 64 && Buffer.isBuffer(source)) {
      // Native copy, without the view object that `set(subarray())` would allocate.
      source.copy(this.data, this.size, start, end);
    } else {
      const data = this.data;
      let at = this.size;
      for (let i = start; i < end; i++) data[at++] = source[i];
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

  /**
   * UTF-8 bytes as a quoted JSON string, escaping quotes, backslashes and control bytes. Long
   * texts (prompts, completions) are scanned four aligned bytes at a time: most words need no
   * escape (4 KB of prose: 19 -> 4.6 us), and the bytes between escapes are copied natively.
   */
  writeJsonString(source: Uint8Array, start: number, end: number): void {
    this.ensure(end - start + 2);
    this.data[this.size++] = 0x22;
    let run = start;
    let i = start;
    if (end - start >= 64) {
      const head = Math.min(end, start + ((4 - ((source.byteOffset + start) & 3)) & 3));
      for (; i < head; i++) if (needsEscape(source[i])) run = this.writeEscaped(source, run, i);
      const words = new Uint32Array(source.buffer, source.byteOffset + i, (end - i) >> 2);
      for (let w = 0; w < words.length; w++) {
        if (wordNeedsEscape(words[w]) === 0) continue;
        for (let k = i + 4 * w; k < i + 4 * w + 4; k++)
          if (needsEscape(source[k])) run = this.writeEscaped(source, run, k);
      }
      i += words.length * 4;
    }
    for (; i < end; i++) if (needsEscape(source[i])) run = this.writeEscaped(source, run, i);
    if (end > run) this.writeBytes(source, run, end);
    this.writeByte(0x22);
  }

  /** Writes the bytes from `run` up to `at`, then the escape of the byte at `at`; returns where the next run starts. */
  private writeEscaped(source: Uint8Array, run: number, at: number): number {
    if (at > run) this.writeBytes(source, run, at);
    const b = source[at];
    this.writeAscii(ESCAPES.get(b) ?? `\\u00${b.toString(16).padStart(2, '0')}`);
    return at + 1;
  }

  /** Ends the row whose bytes were written since the previous row ended. */
  endRow(): void {
    this.addRow(this.rowStart, this.size, 0);
    this.rowStart = this.size;
    this.previous = null;
  }

  /** Drops what was written since the last row ended (a value that turned out invalid). */
  discardPartialRow(): void {
    this.size = this.rowStart;
  }

  /** Bytes its rows take in a packed buffer (`packInto`), alignment included. */
  packedBytes(): number {
    return align8(this.rows * 8) + align8(this.rows) + align8(this.size);
  }

  /** Copies its rows into `buffer` at `offset` (8-aligned); returns the column and the next offset. */
  packInto(buffer: ArrayBuffer, offset: number): [ByteColumn, number] {
    const slices = new Uint32Array(buffer, offset, this.rows * 2);
    slices.set(this.slices.subarray(0, this.rows * 2));
    offset += align8(this.rows * 8);
    const nulls = new Uint8Array(buffer, offset, this.rows);
    nulls.set(this.nulls.subarray(0, this.rows));
    offset += align8(this.rows);
    const data = new Uint8Array(buffer, offset, this.size);
    data.set(this.data.subarray(0, this.size));
    return [{ kind: 'bytes', data, slices, nulls }, offset + align8(this.size)];
  }

  /** Bytes it holds, used or not. */
  capacity(): number {
    return this.data.length + this.slices.byteLength + this.nulls.length;
  }

  /** Empties it for the next batch, keeping its buffers. */
  reset(): void {
    this.size = 0;
    this.rows = 0;
    this.rowStart = 0;
    this.previous = null;
  }

  private endNullRow(): void {
    this.addRow(this.size, this.size, 1);
    this.previous = null;
  }

  private repeatRow(): void {
    const at = (this.rows - 1) * 2;
    this.addRow(this.slices[at], this.slices[at + 1], 0);
  }

  private addRow(start: number, end: number, isNull: number): void {
    if (this.rows === this.nulls.length) {
      this.slices = doubled(this.slices);
      this.nulls = doubled(this.nulls);
    }
    this.slices[this.rows * 2] = start;
    this.slices[this.rows * 2 + 1] = end;
    this.nulls[this.rows++] = isNull;
  }
}

const ESCAPES = new Map<number, string>([
  [0x22, '\\"'],
  [0x5c, '\\\\'],
  [0x0a, '\\n'],
  [0x0d, '\\r'],
  [0x09, '\\t'],
  [0x08, '\\b'],
  [0x0c, '\\f'],
]);
const needsEscape = (byte: number) => byte < 0x20 || byte === 0x22 || byte === 0x5c;
/** Non-zero when one of the four bytes of `word` is below 0x20, '"' or '\\' (the bit tricks of "hasless" and "haszero"). */
function wordNeedsEscape(word: number): number {
  const quote = word ^ 0x22222222;
  const backslash = word ^ 0x5c5c5c5c;
  return (
    (((word - 0x20202020) & ~word) | ((quote - 0x01010101) & ~quote) | ((backslash - 0x01010101) & ~backslash)) &
    0x80808080
  );
}

/**
 * `column` with each value that is not valid UTF-8 decoded with U+FFFD in place of the invalid
 * sequences (the WHATWG decoder never swallows an ASCII byte, so JSON text stays JSON), and how
 * many values were replaced; a value repeated in consecutive rows is counted once.
 */
export function withValidUtf8(column: ByteColumn): { column: ByteColumn; replaced: number } {
  const { data, slices, nulls } = column;
  const out = new ByteColumnBuilder();
  const repairedSlices = new Uint32Array(slices.length);
  let replaced = 0;
  for (let row = 0; row < nulls.length; row++) {
    const start = slices[2 * row];
    const end = slices[2 * row + 1];
    if (row > 0 && start === slices[2 * row - 2] && end === slices[2 * row - 1]) {
      repairedSlices.set(repairedSlices.subarray(2 * row - 2, 2 * row), 2 * row);
      continue;
    }
    repairedSlices[2 * row] = out.size;
    const value = data.subarray(start, end);
    if (isUtf8(value)) out.writeBytes(value);
    else {
      out.writeBytes(Buffer.from(Buffer.from(value).toString('utf8')));
      replaced++;
    }
    repairedSlices[2 * row + 1] = out.size;
  }
  // A buffer of its own: the column may be transferred to another thread.
  const repairedData = new Uint8Array(out.size);
  repairedData.set(out.data.subarray(0, out.size));
  return { column: { kind: 'bytes', data: repairedData, slices: repairedSlices, nulls }, replaced };
}

export class Int64ColumnBuilder implements ColumnBuilder {
  private bytes: Uint8Array;
  private count = 0;
  private nulls: Uint8Array;

  constructor() {
    this.bytes = new Uint8Array(256);
    this.nulls = new Uint8Array(32);
  }

  push(value: ColumnValue): void {
    this.reserve();
    if (value === null) this.nulls[this.count] = 1;
    else {
      new DataView(this.bytes.buffer, this.bytes.byteOffset).setBigInt64(this.count * 8, value as bigint, true);
      this.nulls[this.count] = 0;
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
    for (let i = 0; i < 8; i++) {
      const byte = source[at + i];
      this.bytes[this.count * 8 + i] = byte;
      if (byte !== 0) zero = false;
    }
    this.nulls[this.count] = zero || source[at + 7] >= 0x80 ? 1 : 0;
    this.count++;
  }

  packedBytes(): number {
    return this.count * 8 + align8(this.count);
  }

  packInto(buffer: ArrayBuffer, offset: number): [Int64Column, number] {
    const values = new BigInt64Array(buffer, offset, this.count);
    new Uint8Array(buffer, offset, this.count * 8).set(this.bytes.subarray(0, this.count * 8));
    offset += this.count * 8;
    const nulls = new Uint8Array(buffer, offset, this.count);
    nulls.set(this.nulls.subarray(0, this.count));
    return [{ kind: 'int64', values, nulls }, offset + align8(this.count)];
  }

  capacity(): number {
    return this.bytes.length + this.nulls.length;
  }

  reset(): void {
    this.count = 0;
  }

  private reserve(): void {
    if (this.count < this.nulls.length) return;
    this.bytes = doubled(this.bytes);
    this.nulls = doubled(this.nulls);
  }
}

/** A copy of `array` in one twice its length (in a buffer of its own). */
function doubled<T extends Uint8Array | Uint32Array>(array: T): T {
  const bigger = new (array.constructor as new (length: number) => T)(array.length * 2);
  bigger.set(array);
  return bigger;
}

const align8 = (n: number) => (n + 7) & ~7;

type PackedBuilder = ByteColumnBuilder | Int64ColumnBuilder;

/**
 * Builders of a table's columns, reused batch after batch: a batch's rows are decoded into
 * buffers grown once, then packed into one exactly sized buffer (`buildColumns`). Fresh builders
 * for every batch grew each column's buffers from empty, a dozen allocations and copies per
 * column, and moving a batch between threads listed some 60 buffers. Per table, sets of builders
 * in column order (undefined where a column is a JS array).
 */
const pools = new WeakMap<readonly Column[], (PackedBuilder | undefined)[][]>();

/** Builder sets holding more than this are dropped after use, not kept (a batch of huge spans). */
const POOLED_BYTES_MAX = 8 * 2 ** 20;

/** Builders for every column of a table, each in the form `ColumnData` describes. */
export function columnBuilders(columns: readonly Column[]): ColumnBuilder[] {
  const pooled = pools.get(columns)?.pop();
  if (pooled) return columns.map((_, i) => pooled[i] ?? []);
  return columns.map((c) =>
    !isPacked(c) ? [] : c.type === 'TIMESTAMP_NS' ? new Int64ColumnBuilder() : new ByteColumnBuilder(),
  );
}

const isPacked = (c: Column) => !c.js && (c.type === 'VARCHAR' || c.type === 'JSON' || c.type === 'TIMESTAMP_NS');

/**
 * The columns of `builders` (made by `columnBuilders(columns)`), the byte and time columns
 * packed into one buffer; the builders go back to the pool and must not be used again.
 */
export function buildColumns(columns: readonly Column[], builders: readonly ColumnBuilder[]): ColumnData[] {
  let bytes = 0;
  for (const b of builders) if (!Array.isArray(b)) bytes += (b as PackedBuilder).packedBytes();
  const buffer = new ArrayBuffer(bytes);
  let offset = 0;
  let capacity = 0;
  const built = builders.map((b): ColumnData => {
    if (Array.isArray(b)) return b as ColumnValue[];
    const builder = b as PackedBuilder;
    const [column, next] = builder.packInto(buffer, offset);
    offset = next;
    capacity += builder.capacity();
    builder.reset();
    return column;
  });
  if (capacity <= POOLED_BYTES_MAX) {
    const pool = pools.get(columns) ?? [];
    pools.set(columns, pool);
    if (pool.length < 2) pool.push(builders.map((b) => (Array.isArray(b) ? undefined : (b as PackedBuilder))));
  }
  return built;
}
