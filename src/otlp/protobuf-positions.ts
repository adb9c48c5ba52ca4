import type { ByteColumnBuilder, ColumnBuilder, Int64ColumnBuilder } from './column-builders.js';
import type { ColumnValue } from './columns.js';
import type { ProtobufReader } from './protobuf-reader.js';

/**
 * The protobuf decoder notes where a span's or log record's fields are while it walks the item
 * (the position of a length-delimited field's length, of a fixed64's value; -1 when absent) and
 * reads them only once the item is known valid: these read a field at its position, into a
 * string or straight into a column.
 */

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));

/** The id bytes of the length-delimited field at `at`, as lowercase hex ("" when absent). */
export function idAt(r: ProtobufReader, at: number): string {
  if (at < 0) return '';
  r.pos = at;
  return r.hex();
}

export function stringAt(r: ProtobufReader, at: number): string {
  r.pos = at;
  return r.string();
}

/** Writes the string field at `at` as a JSON string ("" when absent). */
export function writeStringAt(r: ProtobufReader, out: ByteColumnBuilder, at: number): void {
  if (at < 0) {
    out.writeAscii('""');
    return;
  }
  r.pos = at;
  const end = r.lengthDelimited();
  out.writeJsonString(r.buf, r.pos, end);
}

/** Pushes the bytes of the field at `at` (hex for ids); absent, or empty when `emptyIsNull`, is NULL. */
export function pushBytesAt(
  r: ProtobufReader,
  column: ColumnBuilder,
  at: number,
  hex: boolean,
  emptyIsNull = hex,
): void {
  if (at < 0) {
    column.push(emptyIsNull ? null : '');
    return;
  }
  r.pos = at;
  const end = r.lengthDelimited();
  if (end === r.pos && emptyIsNull) {
    column.push(null);
    return;
  }
  const out = column as ByteColumnBuilder;
  if (hex) for (let i = r.pos; i < end; i++) out.writeAscii(HEX[r.buf[i]]);
  else out.writeBytes(r.buf, r.pos, end);
  out.endRow();
}

/** Pushes the fixed64 at `at` (a time), NULL when absent. */
export function pushFixed64At(r: ProtobufReader, column: ColumnBuilder, at: number): void {
  if (at < 0) column.push(null as ColumnValue);
  else (column as Int64ColumnBuilder).pushFixed64(r.buf, at);
}
