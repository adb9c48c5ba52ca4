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
  data = Buffer.allocUnsafeSlow(1024);
  size = 0;
  private slices = new Uint32Array(64);
  private nulls = new Uint8Array(32);
  private rows = 0;
  /** Where the row being written started. */
  private rowStart = 0;
  private previous: string | Uint8Array | null = null;

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
    return { kind: 'bytes', data: this.data.subarray(0, this.size), slices: this.slices.slice(0, this.rows * 2), nulls: this.nulls.slice(0, this.rows) };
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
      const slices = new Uint32Array(this.slices.length * 2);
      slices.set(this.slices);
      this.slices = slices;
      const nulls = new Uint8Array(this.nulls.length * 2);
      nulls.set(this.nulls);
      this.nulls = nulls;
    }
    this.slices[this.rows * 2] = start;
    this.slices[this.rows * 2 + 1] = end;
    this.nulls[this.rows++] = isNull;
  }
}

const ESCAPES: Record<number, string> = { 0x22: '\\"', 0x5c: '\\\\', 0x0a: '\\n', 0x0d: '\\r', 0x09: '\\t', 0x08: '\\b', 0x0c: '\\f' };

export class Int64ColumnBuilder implements ColumnBuilder {
  private bytes = new Uint8Array(256);
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
