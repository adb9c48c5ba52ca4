import { FIXED32, FIXED64, LEN, VARINT } from './protobuf-wire.js';

/** A body that is not valid protobuf for the expected message; the message says where. */
export class ProtobufError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtobufError';
  }
}

/**
 * A cursor over protobuf wire format (https://protobuf.dev/programming-guides/encoding/),
 * bounded to one message. Only what OTLP needs: varints, fixed32/64, length-delimited fields.
 * Every read checks the bound, so truncated or hostile input throws ProtobufError instead of
 * reading past the message.
 */
export class ProtobufReader {
  pos: number;

  constructor(
    readonly buf: Buffer,
    start = 0,
    readonly end = buf.length,
  ) {
    this.pos = start;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  /** The next field's tag: field number * 8 + wire type. */
  tag(): number {
    const tag = this.uint32();
    if (tag >>> 3 === 0) throw new ProtobufError(`invalid field number 0 at byte ${this.pos}`);
    return tag;
  }

  /** A varint that must fit in 32 bits (lengths, enums, tags, counts). */
  uint32(): number {
    const buf = this.buf;
    const pos = this.pos;
    // Tags, small lengths and enums take one or two bytes: read those without a loop.
    if (pos + 1 < this.end) {
      const b0 = buf[pos];
      if (b0 < 0x80) {
        this.pos = pos + 1;
        return b0;
      }
      const b1 = buf[pos + 1];
      if (b1 < 0x80) {
        this.pos = pos + 2;
        return (b0 & 0x7f) | (b1 << 7);
      }
    }
    return this.uint32Slow();
  }

  private uint32Slow(): number {
    const buf = this.buf;
    let pos = this.pos;
    let result = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (pos >= this.end) throw new ProtobufError(`truncated varint at byte ${pos}`);
      const b = buf[pos++];
      result += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) {
        this.pos = pos;
        return result > 0xffffffff ? result % 2 ** 32 : result;
      }
    }
    // Longer varints (negative int32 enums are sign-extended to 10 bytes): keep the low 32 bits.
    for (let i = 0; i < 5; i++) {
      if (pos >= this.end) throw new ProtobufError(`truncated varint at byte ${pos}`);
      if (buf[pos++] < 0x80) {
        this.pos = pos;
        return result % 2 ** 32;
      }
    }
    throw new ProtobufError(`varint longer than 10 bytes at byte ${this.pos}`);
  }

  /** An int64 varint as exact decimal text (OTLP int values may exceed 2^53). */
  int64Text(): string {
    const start = this.pos;
    let lo = 0;
    let hi = 0;
    let i = 0;
    for (; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtobufError(`truncated varint at byte ${this.pos}`);
      const b = this.buf[this.pos++];
      if (i < 4) lo |= (b & 0x7f) << (i * 7);
      else if (i === 4) {
        lo |= (b & 0x0f) << 28;
        hi = (b & 0x7f) >> 4;
      } else hi |= (b & 0x7f) << (i * 7 - 32);
      if (b < 0x80) break;
    }
    if (i === 10) throw new ProtobufError(`varint longer than 10 bytes at byte ${start}`);
    lo >>>= 0;
    if (hi === 0) return String(lo);
    if (hi > 0 && hi < 0x200000) return String(hi * 2 ** 32 + lo);
    return BigInt.asIntN(64, (BigInt(hi >>> 0) << 32n) | BigInt(lo)).toString();
  }

  fixed32(): number {
    this.need(4);
    const v = this.buf.readUInt32LE(this.pos);
    this.pos += 4;
    return v;
  }

  fixed64(): bigint {
    this.need(8);
    const v = this.buf.readBigUInt64LE(this.pos);
    this.pos += 8;
    return v;
  }

  double(): number {
    this.need(8);
    const v = this.buf.readDoubleLE(this.pos);
    this.pos += 8;
    return v;
  }

  /** A length-delimited field: returns its end and leaves pos at its start. */
  lengthDelimited(): number {
    const length = this.uint32();
    this.need(length);
    return this.pos + length;
  }

  string(): string {
    const end = this.lengthDelimited();
    const s = this.buf.toString('utf8', this.pos, end);
    this.pos = end;
    return s;
  }

  /** A copy of the field's bytes (text kept as sent, for a check of the whole column later). */
  bytes(): Buffer {
    const end = this.lengthDelimited();
    const b = Buffer.from(this.buf.subarray(this.pos, end));
    this.pos = end;
    return b;
  }

  /** Bytes as lowercase hex (trace and span ids). */
  hex(): string {
    const end = this.lengthDelimited();
    const s = this.buf.toString('hex', this.pos, end);
    this.pos = end;
    return s;
  }

  base64(): string {
    const end = this.lengthDelimited();
    const s = this.buf.toString('base64', this.pos, end);
    this.pos = end;
    return s;
  }

  /** Skips the value of the field whose tag was just read, of `wireType`; returns where it starts, to read it later. */
  mark(wireType: number): number {
    const at = this.pos;
    this.skip(wireType);
    return at;
  }

  /** Skips the value of the field whose tag was just read (one unknown to the reader, or unwanted). */
  skipField(tag: number): void {
    this.skip(tag & 7);
  }

  skip(wireType: number): void {
    switch (wireType) {
      case VARINT:
        this.uint32();
        return;
      case FIXED64:
        this.need(8);
        this.pos += 8;
        return;
      case LEN:
        this.pos = this.lengthDelimited();
        return;
      case FIXED32:
        this.need(4);
        this.pos += 4;
        return;
      default:
        throw new ProtobufError(`unsupported wire type ${wireType} at byte ${this.pos}`);
    }
  }

  private need(bytes: number): void {
    if (this.pos + bytes > this.end) {
      throw new ProtobufError(
        `truncated message: ${bytes} bytes needed at byte ${this.pos}, ${this.end - this.pos} left`,
      );
    }
  }
}
