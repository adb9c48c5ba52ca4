import type { Attributes, HrTime, Link, SpanContext, SpanStatus } from '@opentelemetry/api';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace';

/**
 * One span as the length-delimited field `field` holding its OTLP `Span` message: the bytes the
 * SDK's serializer (`@opentelemetry/otlp-transformer`) writes for it, the same fields in the same
 * order, with the same ones always present (dropped counts, status, flags). That serializer only
 * encodes whole requests, in two passes (it measures, then writes): as a request of one, an LLM
 * span with its bodies took 17 us, this 6 (same machine, same run). span-encoding.test.ts holds
 * the two to the same bytes.
 */
export function encodeSpanField(span: ReadableSpan, field: number): Uint8Array {
  const w = writer;
  w.pos = 0;
  w.tag(field, LEN);
  const message = w.beginLength();
  const context = span.spanContext();
  writeContext(w, context);
  if (span.parentSpanContext?.spanId) {
    w.tag(4, LEN);
    w.hex(span.parentSpanContext.spanId);
  }
  w.tag(5, LEN);
  w.string(span.name);
  const kind = span.kind == null ? 0 : span.kind + 1;
  if (kind !== 0) {
    w.tag(6, VARINT);
    w.varint(kind);
  }
  w.tag(7, FIXED64);
  w.hrTime(span.startTime);
  w.tag(8, FIXED64);
  w.hrTime(span.endTime);
  writeAttributes(w, span.attributes, 9);
  w.tag(10, VARINT);
  w.varint(span.droppedAttributesCount);
  for (const event of span.events) writeEvent(w, event);
  w.tag(12, VARINT);
  w.varint(span.droppedEventsCount);
  for (const link of span.links) writeLink(w, link);
  w.tag(14, VARINT);
  w.varint(span.droppedLinksCount);
  writeStatus(w, span.status);
  w.tag(16, FIXED32);
  w.fixed32(spanFlags(context.traceFlags, span.parentSpanContext?.isRemote));
  w.endLength(message);
  // A copy of its exact size from Node's pool of small buffers: one allocation per 8 KB of spans
  // rather than one per span, each of which the GC tracks and sweeps.
  const encoded = Buffer.allocUnsafe(w.pos);
  w.buf.copy(encoded, 0, 0, w.pos);
  w.shrink();
  return encoded;
}

const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;
const FIXED32 = 5;

// OTLP's Span.flags: the W3C trace flags, and whether the parent (or link) is remote. Never 0,
// so always written.
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;
const spanFlags = (traceFlags: number, isRemote?: boolean) => (traceFlags & 0xff) | HAS_IS_REMOTE | (isRemote ? IS_REMOTE : 0);

/** trace_id, span_id and trace_state: fields 1 to 3 of a Span and of a Span.Link alike. */
function writeContext(w: Writer, context: SpanContext): void {
  w.tag(1, LEN);
  w.hex(context.traceId);
  w.tag(2, LEN);
  w.hex(context.spanId);
  const traceState = context.traceState?.serialize();
  if (traceState) {
    w.tag(3, LEN);
    w.string(traceState);
  }
}

function writeEvent(w: Writer, event: TimedEvent): void {
  w.tag(11, LEN);
  const start = w.beginLength();
  w.tag(1, FIXED64);
  w.hrTime(event.time);
  w.tag(2, LEN);
  w.string(event.name);
  if (event.attributes) writeAttributes(w, event.attributes, 3);
  w.tag(4, VARINT);
  w.varint(event.droppedAttributesCount || 0);
  w.endLength(start);
}

function writeLink(w: Writer, link: Link): void {
  w.tag(13, LEN);
  const start = w.beginLength();
  const { context } = link;
  writeContext(w, context);
  if (link.attributes) writeAttributes(w, link.attributes, 4);
  w.tag(5, VARINT);
  w.varint(link.droppedAttributesCount || 0);
  w.tag(6, FIXED32);
  w.fixed32(spanFlags(context.traceFlags, context.isRemote));
  w.endLength(start);
}

function writeStatus(w: Writer, status: SpanStatus): void {
  w.tag(15, LEN);
  const start = w.beginLength();
  if (status.message) {
    w.tag(2, LEN);
    w.string(status.message);
  }
  w.tag(3, VARINT);
  w.varint(status.code);
  w.endLength(start);
}

function writeAttributes(w: Writer, attributes: Attributes, field: number): void {
  for (const key in attributes) {
    if (!Object.prototype.hasOwnProperty.call(attributes, key)) continue;
    const value = attributes[key];
    const seen = field === SPAN_ATTRIBUTES ? seenAttributes.get(key) : undefined;
    if (seen !== undefined && seen.value === value) {
      w.bytes(seen.bytes);
      continue;
    }
    const at = w.pos;
    w.tag(field, LEN);
    const start = w.beginLength();
    w.tag(1, LEN);
    w.string(key);
    w.tag(2, LEN);
    const valueStart = w.beginLength();
    writeAnyValue(w, value);
    w.endLength(valueStart);
    w.endLength(start);
    if (field === SPAN_ATTRIBUTES && rememberable(value, seen)) remember(key, seen, value, w.buf.subarray(at, w.pos));
  }
}

const SPAN_ATTRIBUTES = 9;

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

const seenAttributes = new Map<string, SeenAttribute>();
const MAX_MISSES = 8;
const MAX_SEEN_KEYS = 256;

const rememberable = (value: unknown, seen: SeenAttribute | undefined) =>
  (seen === undefined ? seenAttributes.size < MAX_SEEN_KEYS : seen.misses < MAX_MISSES) &&
  (typeof value === 'number' || typeof value === 'boolean' || (typeof value === 'string' && value.length <= 64));

function remember(key: string, seen: SeenAttribute | undefined, value: unknown, bytes: Uint8Array): void {
  if (!seen) {
    seenAttributes.set(key, { value, bytes: Uint8Array.from(bytes), misses: 0 });
    return;
  }
  seen.misses++;
  seen.value = value;
  seen.bytes = Uint8Array.from(bytes);
}

function writeAnyValue(w: Writer, value: unknown): void {
  switch (typeof value) {
    case 'string':
      w.tag(1, LEN);
      w.string(value);
      return;
    case 'boolean':
      w.tag(2, VARINT);
      w.varint(value ? 1 : 0);
      return;
    case 'number':
      if (Number.isInteger(value) && value >= -(2 ** 63) && value < 2 ** 63) {
        w.tag(3, VARINT);
        w.varint(value);
      } else {
        w.tag(4, FIXED64);
        w.double(value);
      }
      return;
  }
  if (Array.isArray(value)) {
    w.tag(5, LEN);
    const start = w.beginLength();
    for (const item of value) {
      w.tag(1, LEN);
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

  tag(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
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
    for (let i = 0; i < length; i++) this.buf[this.pos++] = (HEX_DIGIT(text.charCodeAt(2 * i)) << 4) | HEX_DIGIT(text.charCodeAt(2 * i + 1));
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

const writer = new Writer();
