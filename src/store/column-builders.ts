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

  /** Starts in `arena` at `offset` (BYTE_BUILDER_START bytes), else in buffers of its own. */
  constructor(arena = new ArrayBuffer(BYTE_BUILDER_START), offset = 0) {
    this.data = Buffer.from(arena, offset, 1024);
    this.slices = new Uint32Array(arena, offset + 1024, 64);
    this.nulls = new Uint8Array(arena, offset + 1280, 32);
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
    this.addRow(this.rowStart, this.size, 0);
    this.rowStart = this.size;
    this.previous = null;
  }

  /** Drops what was written since the last row ended (a value that turned out invalid). */
  discardPartialRow(): void {
    this.size = this.rowStart;
  }

  build(): ByteColumn {
    return { kind: 'bytes', data: this.data.subarray(0, this.size), slices: this.slices.subarray(0, this.rows * 2), nulls: this.nulls.subarray(0, this.rows) };
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

const ESCAPES: Record<number, string> = { 0x22: '\\"', 0x5c: '\\\\', 0x0a: '\\n', 0x0d: '\\r', 0x09: '\\t', 0x08: '\\b', 0x0c: '\\f' };

/** Bytes a builder starts with (data, slices, nulls; an int64 builder: values, nulls). */
const BYTE_BUILDER_START = 1024 + 256 + 32;
const INT64_BUILDER_START = 256 + 32;

export class Int64ColumnBuilder implements ColumnBuilder {
  private bytes: Uint8Array;
  private count = 0;
  private nulls: Uint8Array;

  /** Starts in `arena` at `offset` (INT64_BUILDER_START bytes, 8-aligned), else in buffers of its own. */
  constructor(arena = new ArrayBuffer(INT64_BUILDER_START), offset = 0) {
    this.bytes = new Uint8Array(arena, offset, 256);
    this.nulls = new Uint8Array(arena, offset + 256, 32);
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
    for (let i = 0; i < 8; i++) if ((this.bytes[this.count * 8 + i] = source[at + i]) !== 0) zero = false;
    this.nulls[this.count] = zero || source[at + 7] >= 0x80 ? 1 : 0;
    this.count++;
  }

  build(): Int64Column {
    return { kind: 'int64', values: new BigInt64Array(this.bytes.buffer, this.bytes.byteOffset, this.count), nulls: this.nulls.subarray(0, this.count) };
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

/**
 * Builders for every column of a table, each in the form `ColumnData` describes. They start in
 * one shared buffer: a batch of two spans made some 80 buffers, one per column array, and that
 * allocation was a tenth of the server's work on such small requests.
 */
export function columnBuilders(columns: readonly Column[]): ColumnBuilder[] {
  const kinds = columns.map((c) => (c.js ? 'js' : c.type === 'VARCHAR' || c.type === 'JSON' ? 'bytes' : c.type === 'TIMESTAMP_NS' ? 'int64' : 'js'));
  const arena = new ArrayBuffer(kinds.reduce((sum, kind) => sum + (kind === 'bytes' ? BYTE_BUILDER_START : kind === 'int64' ? INT64_BUILDER_START : 0), 0));
  let offset = 0;
  return kinds.map((kind) => {
    if (kind === 'bytes') return new ByteColumnBuilder(arena, (offset += BYTE_BUILDER_START) - BYTE_BUILDER_START);
    if (kind === 'int64') return new Int64ColumnBuilder(arena, (offset += INT64_BUILDER_START) - INT64_BUILDER_START);
    return [] as ColumnValue[];
  });
}

export function buildColumns(builders: readonly ColumnBuilder[]): ColumnData[] {
  return builders.map((b) => (Array.isArray(b) ? (b as ColumnValue[]) : (b as ByteColumnBuilder | Int64ColumnBuilder).build()));
}
