import type { Attributes, HrTime, Link, SpanContext, SpanStatus } from '@opentelemetry/api';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace';
import { AnyValue, ArrayValue, KeyValue, Span, SpanEvent, SpanLink, Status } from './otlp-proto.js';
import { FIXED32, FIXED64, LEN, tag, VARINT } from './protobuf-wire.js';

/**
 * Writes OTLP `Span` messages (opentelemetry.proto.trace.v1.Span): the bytes the SDK's
 * serializer (`@opentelemetry/otlp-transformer`) writes for a span, the same fields in the same
 * order, with the same ones always present (dropped counts, status, flags). That serializer only
 * encodes whole requests, in two passes (it measures, then writes): as a request of one, an LLM
 * span with its bodies took 17 us, this 6 (same machine, same run). span-encoding.test.ts holds
 * the two to the same bytes. A writer reuses its buffer and learns the attributes its spans
 * repeat (SeenAttribute): one span processor keeps one.
 */
export class SpanMessageWriter {
  private readonly w = new Writer();
  private readonly seen = new SeenAttributes();

  /** One span as the length-delimited field `field` holding its Span message. */
  spanField(span: ReadableSpan, field: number): Uint8Array {
    const w = this.w;
    w.pos = 0;
    w.tag(field, LEN);
    const message = w.beginLength();
    const context = span.spanContext();
    writeContext(w, context);
    if (span.parentSpanContext?.spanId) {
      w.tag(Span.parent_span_id, LEN);
      w.hex(span.parentSpanContext.spanId);
    }
    w.tag(Span.name, LEN);
    w.string(span.name);
    const kind = span.kind == null ? 0 : span.kind + 1;
    if (kind !== 0) {
      w.tag(Span.kind, VARINT);
      w.varint(kind);
    }
    w.tag(Span.start_time_unix_nano, FIXED64);
    w.hrTime(span.startTime);
    w.tag(Span.end_time_unix_nano, FIXED64);
    w.hrTime(span.endTime);
    writeAttributes(w, span.attributes, Span.attributes, this.seen);
    w.tag(Span.dropped_attributes_count, VARINT);
    w.varint(span.droppedAttributesCount);
    for (const event of span.events) writeEvent(w, event);
    w.tag(Span.dropped_events_count, VARINT);
    w.varint(span.droppedEventsCount);
    for (const link of span.links) writeLink(w, link);
    w.tag(Span.dropped_links_count, VARINT);
    w.varint(span.droppedLinksCount);
    writeStatus(w, span.status);
    w.tag(Span.flags, FIXED32);
    w.fixed32(spanFlags(context.traceFlags, span.parentSpanContext?.isRemote));
    w.endLength(message);
    // A copy of its exact size from Node's pool of small buffers: one allocation per 8 KB of spans
    // rather than one per span, each of which the GC tracks and sweeps.
    const encoded = Buffer.allocUnsafe(w.pos);
    w.buf.copy(encoded, 0, 0, w.pos);
    w.shrink();
    return encoded;
  }
}

// OTLP's Span.flags: the W3C trace flags, and whether the parent (or link) is remote. Never 0,
// so always written.
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;
const spanFlags = (traceFlags: number, isRemote?: boolean) =>
  (traceFlags & 0xff) | HAS_IS_REMOTE | (isRemote ? IS_REMOTE : 0);

/** trace_id, span_id and trace_state: the same fields of a Span and of a Span.Link (`satisfies` checks). */
function writeContext(w: Writer, context: SpanContext): void {
  w.tag(Span.trace_id satisfies typeof SpanLink.trace_id, LEN);
  w.hex(context.traceId);
  w.tag(Span.span_id satisfies typeof SpanLink.span_id, LEN);
  w.hex(context.spanId);
  const traceState = context.traceState?.serialize();
  if (traceState) {
    w.tag(Span.trace_state satisfies typeof SpanLink.trace_state, LEN);
    w.string(traceState);
  }
}

/** A Span.Event as the span's field `events`. */
function writeEvent(w: Writer, event: TimedEvent): void {
  w.tag(Span.events, LEN);
  const start = w.beginLength();
  w.tag(SpanEvent.time_unix_nano, FIXED64);
  w.hrTime(event.time);
  w.tag(SpanEvent.name, LEN);
  w.string(event.name);
  if (event.attributes) writeAttributes(w, event.attributes, SpanEvent.attributes);
  w.tag(SpanEvent.dropped_attributes_count, VARINT);
  w.varint(event.droppedAttributesCount || 0);
  w.endLength(start);
}

/** A Span.Link as the span's field `links`. */
function writeLink(w: Writer, link: Link): void {
  w.tag(Span.links, LEN);
  const start = w.beginLength();
  const { context } = link;
  writeContext(w, context);
  if (link.attributes) writeAttributes(w, link.attributes, SpanLink.attributes);
  w.tag(SpanLink.dropped_attributes_count, VARINT);
  w.varint(link.droppedAttributesCount || 0);
  w.tag(SpanLink.flags, FIXED32);
  w.fixed32(spanFlags(context.traceFlags, context.isRemote));
  w.endLength(start);
}

/** A Status as the span's field `status`. */
function writeStatus(w: Writer, status: SpanStatus): void {
  w.tag(Span.status, LEN);
  const start = w.beginLength();
  if (status.message) {
    w.tag(Status.message, LEN);
    w.string(status.message);
  }
  w.tag(Status.code, VARINT);
  w.varint(status.code);
  w.endLength(start);
}

/**
 * Attributes as the KeyValue fields `field` of the message being written. `seen` is given for a
 * span's own attributes: those repeat call after call (see SeenAttributes).
 */
function writeAttributes(w: Writer, attributes: Attributes, field: number, seen?: SeenAttributes): void {
  for (const key in attributes) {
    // The pattern V8 optimizes in a for-in loop (a map check); Object.hasOwn made encoding 3-4% slower.
    // biome-ignore lint/suspicious/noPrototypeBuiltins: measured, see above
    if (!Object.prototype.hasOwnProperty.call(attributes, key)) continue;
    const value = attributes[key];
    const last = seen?.get(key);
    if (last !== undefined && last.value === value) {
      w.bytes(last.bytes);
      continue;
    }
    const at = w.pos;
    w.tag(field, LEN);
    const start = w.beginLength();
    w.tag(KeyValue.key, LEN);
    w.string(key);
    w.tag(KeyValue.value, LEN);
    const valueStart = w.beginLength();
    writeAnyValue(w, value);
    w.endLength(valueStart);
    w.endLength(start);
    if (seen?.rememberable(value, last)) seen.remember(key, last, value, w.buf.subarray(at, w.pos));
  }
}

/**
 * The last KeyValue written for each span attribute key whose value is short and scalar: most of
 * an LLM span's attributes (method, URL, provider, API, model, status) are the same call after
 * call, and copying their bytes costs a fraction of writing them (an LLM span of 1.1 KB: 11 ->
 * 6-7.5 us). A key whose value has changed MAX_MISSES times (ids, token counts) keeps the value it
 * had then, so that its changes cost no copy.
 */
interface SeenAttribute {
  value: unknown;
  bytes: Uint8Array;
  misses: number;
}

const MAX_MISSES = 8;
const MAX_SEEN_KEYS = 256;

class SeenAttributes {
  private readonly byKey = new Map<string, SeenAttribute>();

  get(key: string): SeenAttribute | undefined {
    return this.byKey.get(key);
  }

  rememberable(value: unknown, seen: SeenAttribute | undefined): boolean {
    return (
      (seen === undefined ? this.byKey.size < MAX_SEEN_KEYS : seen.misses < MAX_MISSES) &&
      (typeof value === 'number' || typeof value === 'boolean' || (typeof value === 'string' && value.length <= 64))
    );
  }

  remember(key: string, seen: SeenAttribute | undefined, value: unknown, bytes: Uint8Array): void {
    if (!seen) {
      this.byKey.set(key, { value, bytes: Uint8Array.from(bytes), misses: 0 });
      return;
    }
    seen.misses++;
    seen.value = value;
    seen.bytes = Uint8Array.from(bytes);
  }
}

function writeAnyValue(w: Writer, value: unknown): void {
  switch (typeof value) {
    case 'string':
      w.tag(AnyValue.string_value, LEN);
      w.string(value);
      return;
    case 'boolean':
      w.tag(AnyValue.bool_value, VARINT);
      w.varint(value ? 1 : 0);
      return;
    case 'number':
      if (Number.isInteger(value) && value >= -(2 ** 63) && value < 2 ** 63) {
        w.tag(AnyValue.int_value, VARINT);
        w.varint(value);
      } else {
        w.tag(AnyValue.double_value, FIXED64);
        w.double(value);
      }
      return;
  }
  if (Array.isArray(value)) {
    w.tag(AnyValue.array_value, LEN);
    const start = w.beginLength();
    for (const item of value) {
      w.tag(ArrayValue.values, LEN);
      const itemStart = w.beginLength();
      writeAnyValue(w, item);
      w.endLength(itemStart);
    }
    w.endLength(start);
  }
  // The SDK keeps no other attribute values (it drops objects and byte arrays as they are set).
}

const WRITER_START = 64 * 1024;
const HEX_DIGIT = (code: number) => (code <= 57 ? code - 48 : (code | 0x20) - 87);

/**
 * A growing buffer, reused for every span. A length-delimited field reserves one byte for its
 * length and moves its content when the length turns out longer, as the SDK's writer does.
 */
class Writer {
  buf = Buffer.allocUnsafe(WRITER_START);
  pos = 0;

  /** Gives back what one very large span made the buffer grow to. */
  shrink(): void {
    if (this.buf.length > 16 * WRITER_START) this.buf = Buffer.allocUnsafe(WRITER_START);
  }

  private reserve(bytes: number): void {
    if (this.pos + bytes <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + bytes));
    this.buf.copy(bigger, 0, 0, this.pos);
    this.buf = bigger;
  }

  /**
   * A field's tag. Named field numbers are values the compiler cannot fold into the varint, as it
   * did literal ones: a tag of one byte (fields 1 to 15) is written without the varint's loop.
   */
  tag(field: number, wireType: number): void {
    const value = tag(field, wireType);
    if (value > 0x7f) {
      this.varint(value);
      return;
    }
    this.reserve(1);
    this.buf[this.pos++] = value;
  }

  /** A varint; negative and 64-bit integers as two's complement, as protobuf's int64. */
  varint(value: number): void {
    this.reserve(10);
    const buf = this.buf;
    if (value >= 0 && value <= 0xffffffff) {
      let v = value >>> 0;
      while (v > 127) {
        buf[this.pos++] = (v & 127) | 128;
        v >>>= 7;
      }
      buf[this.pos++] = v;
      return;
    }
    let low = Math.abs(value) >>> 0;
    let high = (Math.abs(value) / 4294967296) >>> 0;
    if (value < 0) {
      low = ~low >>> 0;
      high = ~high >>> 0;
      low = (low + 1) >>> 0;
      if (low === 0) high = (high + 1) >>> 0;
    }
    while (high > 0 || low > 127) {
      buf[this.pos++] = (low & 127) | 128;
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    buf[this.pos++] = low & 127;
  }

  fixed32(value: number): void {
    this.reserve(4);
    this.buf.writeUInt32LE(value >>> 0, this.pos);
    this.pos += 4;
  }

  /** An HrTime ([seconds, nanoseconds]) as nanoseconds, exact past 2^53. */
  hrTime([seconds, nanos]: HrTime): void {
    this.reserve(8);
    const total = BigInt(seconds) * 1_000_000_000n + BigInt(nanos);
    this.buf.writeBigUInt64LE(BigInt.asUintN(64, total), this.pos);
    this.pos += 8;
  }

  double(value: number): void {
    this.reserve(8);
    this.buf.writeDoubleLE(value, this.pos);
    this.pos += 8;
  }

  /** A lowercase or uppercase hex id as its bytes. */
  hex(text: string): void {
    const length = text.length >>> 1;
    this.varint(length);
    this.reserve(length);
    for (let i = 0; i < length; i++)
      this.buf[this.pos++] = (HEX_DIGIT(text.charCodeAt(2 * i)) << 4) | HEX_DIGIT(text.charCodeAt(2 * i + 1));
  }

  string(text: string): void {
    // Short ASCII text (keys, names) is copied here: cheaper than a call into the native encoder.
    if (text.length < 64) {
      let ascii = true;
      for (let i = 0; i < text.length && ascii; i++) ascii = text.charCodeAt(i) < 128;
      if (ascii) {
        this.varint(text.length);
        this.reserve(text.length);
        for (let i = 0; i < text.length; i++) this.buf[this.pos++] = text.charCodeAt(i);
        return;
      }
    }
    const length = Buffer.byteLength(text, 'utf8');
    this.varint(length);
    this.reserve(length);
    this.pos += this.buf.write(text, this.pos, 'utf8');
  }

  bytes(bytes: Uint8Array): void {
    this.reserve(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
  }

  beginLength(): number {
    this.reserve(1);
    return this.pos++;
  }

  /** Writes the length of what followed `at` into the byte reserved there. */
  endLength(at: number): void {
    const length = this.pos - at - 1;
    let size = 1;
    while (length >= 2 ** (7 * size)) size++;
    if (size > 1) {
      this.reserve(size - 1);
      this.buf.copy(this.buf, at + size, at + 1, this.pos);
      this.pos += size - 1;
    }
    let v = length;
    for (let i = 0; i < size - 1; i++) {
      this.buf[at + i] = (v & 127) | 128;
      v = Math.floor(v / 128);
    }
    this.buf[at + size - 1] = v;
  }
}
