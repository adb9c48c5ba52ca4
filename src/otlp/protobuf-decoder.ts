import { isUtf8 } from 'node:buffer';
import { ByteColumnBuilder, withValidUtf8 } from './column-builders.js';
import { finishBatch, newLogBatch, newSpanBatch, type BatchBuilder, type DecodedBatch } from './batch.js';
import { forEachResourceGroup, type WalkState } from './protobuf-groups.js';
import { readLogRecord } from './protobuf-logs.js';
import { ProtobufReader } from './protobuf-reader.js';
import { readSpan } from './protobuf-spans.js';
import { ValueWriter } from './protobuf-values.js';

/**
 * Decodes OTLP protobuf requests (opentelemetry/proto/collector/{trace,logs}/v1) straight into
 * column buffers: attribute lists become JSON text byte by byte, copied from the request, so
 * that no JS string is made for them. Only the few values the store reads (ids, attribution)
 * become strings. Field numbers are those of the OTLP .proto files (otlp-proto.ts); unknown
 * fields are skipped, as protobuf requires. A decode throws ProtobufError for a body that is not
 * such a message.
 *
 * The walk is in protobuf-groups.ts (requests, resources, scopes), the items in
 * protobuf-spans.ts and protobuf-logs.ts, attribute values in protobuf-values.ts. A decoder
 * learns the keys and attributes that its requests repeat: a thread that decodes keeps one.
 */
export class ProtobufDecoder {
  private readonly state: WalkState = { values: new ValueWriter(), scratch: new ByteColumnBuilder() };

  decodeTraces(body: Buffer): DecodedBatch {
    const batch = newSpanBatch();
    const values = this.state.values;
    forEachResourceGroup(new ProtobufReader(body), this.state, (r, end, group) =>
      readSpan(r, end, group, batch, values),
    );
    return finishChecked(batch);
  }

  decodeLogs(body: Buffer): DecodedBatch {
    const batch = newLogBatch();
    const values = this.state.values;
    forEachResourceGroup(new ProtobufReader(body), this.state, (r, end, group) =>
      readLogRecord(r, end, group, batch, values),
    );
    return finishChecked(batch);
  }
}

/**
 * Text copied byte for byte must be UTF-8 for DuckDB; protobuf requires it of strings, but a
 * broken exporter may send anything. Such strings are stored with U+FFFD, as OTLP/JSON bodies
 * are; one check per column keeps the common case cheap.
 */
function finishChecked(batch: BatchBuilder): DecodedBatch {
  const decoded = finishBatch(batch);
  let replacedValues = 0;
  const columns = decoded.rows.columns.map((column) => {
    if (Array.isArray(column) || column.kind !== 'bytes' || isUtf8(column.data)) return column;
    const repaired = withValidUtf8(column);
    replacedValues += repaired.replaced;
    return repaired.column;
  });
  return replacedValues === 0
    ? decoded
    : { ...decoded, rows: { length: decoded.rows.length, columns }, replacedValues };
}
