import { ByteColumnBuilder } from './column-builders.js';
import { ATTR } from '../api/semconv.js';
import { noAttribution, noteAttribution, type Attribution } from './batch.js';
import { MAX_NESTING_DEPTH, TooDeepError } from './nesting.js';
import { AnyValue, ArrayValue, KeyValue, KeyValueList } from './otlp-proto.js';
import type { ProtobufReader } from './protobuf-reader.js';
import { FIXED64, LEN, tag, VARINT } from './protobuf-wire.js';

/** What attribute lists of interest to agl say (attribution, service.name). */
export interface Found {
  readonly attribution: Attribution;
  serviceName: string | null;
}

export const nothingFound = (): Found => ({ attribution: noAttribution(), serviceName: null });

/** Attribute positions past this are neither predicted nor remembered (see ValueWriter). */
const UNTRACKED_POSITION = 64;

const KEY_VALUE_KEY = tag(KeyValue.key, LEN);
const KEY_VALUE_VALUE = tag(KeyValue.value, LEN);
const STRING_VALUE = tag(AnyValue.string_value, LEN);
const BOOL_VALUE = tag(AnyValue.bool_value, VARINT);
const INT_VALUE = tag(AnyValue.int_value, VARINT);
const DOUBLE_VALUE = tag(AnyValue.double_value, FIXED64);
const ARRAY_VALUE = tag(AnyValue.array_value, LEN);
const KVLIST_VALUE = tag(AnyValue.kvlist_value, LEN);
const BYTES_VALUE = tag(AnyValue.bytes_value, LEN);
const ARRAY_VALUE_VALUES = tag(ArrayValue.values, LEN);
const KEY_VALUE_LIST_VALUES = tag(KeyValueList.values, LEN);

type Role = 'rollout' | 'attempt' | 'sequence' | 'service' | null;

interface Key {
  readonly bytes: Buffer;
  /** `"key":` as JSON bytes. */
  readonly json: Buffer;
  readonly text: string;
  readonly role: Role;
}

const ROLES: Record<string, Role> = {
  [ATTR.rolloutId]: 'rollout',
  [ATTR.attemptId]: 'attempt',
  [ATTR.sequenceId]: 'sequence',
  'service.name': 'service',
};

const EMPTY_KEY: Key = { bytes: Buffer.alloc(0), json: Buffer.from('"":'), text: '', role: null };

/** Keys cached before the cache starts over (a sender that makes up a new key for every span). */
const MAX_CACHED_KEYS = 10_000;

/**
 * A span attribute as it was last seen at one position, and its JSON. Most of a span's attributes
 * repeat in every span an SDK sends (operation, system, model, settings, the attempt), in the
 * same order: when the same bytes come at the same position, their JSON is copied instead of
 * decoded again (decoding small spans: 7.0-8.0 -> 5.3-7.2 us a span, interleaved runs). An entry
 * that has matched stays when an attribute that changes in every span (ids, counts) comes by; one
 * that never matched is replaced after 64 tries, so a new layout takes over.
 */
interface SeenAttribute {
  readonly bytes: Buffer;
  readonly json: Buffer;
  hits: number;
  misses: number;
}

/** Longer attributes (texts) are rarely repeated whole: not compared. */
const SEEN_ATTRIBUTE_BYTES = 128;

/**
 * Writes KeyValue and AnyValue messages (opentelemetry.proto.common.v1) as JSON text, byte by
 * byte from the request into a column: a KeyValue as `"key":value`, an AnyValue with bytes as
 * base64, int64 exact, NaN and infinities as strings. It learns what the requests it decodes
 * repeat (keys, whole attributes at the same position), so one writer serves one sender's
 * stream of requests best: each decode thread owns one (ProtobufDecoder).
 */
export class ValueWriter {
  // Attribute keys repeat in every span: look them up by a hash of their bytes, so that a key
  // costs no string and no escaping after its first appearance.
  private readonly keys = new Map<number, Key[]>();
  private cachedKeys = 0;
  // The key seen last at each attribute position: spans from one SDK repeat their keys in the
  // same order, so most lookups are one byte comparison instead of a hash.
  private readonly keyAtPosition: (Key | undefined)[] = [];
  private readonly attributeAtPosition: (SeenAttribute | undefined)[] = [];

  /**
   * Writes the KeyValue that ends at `end` as `"key":value`, noting agl's attribution keys and
   * service.name in `found`. `position` is its index in a span's attribute list (repeated
   * attributes are copied, see SeenAttribute), UNTRACKED_POSITION elsewhere; `depth` is the
   * nesting level of its value: 1 in an attribute list.
   */
  writeKeyValue(
    r: ProtobufReader,
    end: number,
    out: ByteColumnBuilder,
    found?: Found,
    position = UNTRACKED_POSITION,
    depth = 1,
  ): void {
    const start = r.pos;
    const remembered = position < UNTRACKED_POSITION && end - start <= SEEN_ATTRIBUTE_BYTES;
    const seen = remembered ? this.attributeAtPosition[position] : undefined;
    if (seen !== undefined) {
      if (seen.bytes.length === end - start && sameBytes(seen.bytes, r.buf, start)) {
        seen.hits++;
        out.writeBytes(seen.json);
        r.pos = end;
        return;
      }
      seen.misses++;
    }
    const jsonStart = out.size;
    const key = this.writeKeyValueOnce(r, end, out, found, position, depth);
    // An attribution key is never remembered: its value must be noted in every span.
    if (remembered && key.role === null && (seen === undefined || seen.hits > 0 || seen.misses > 64)) {
      this.attributeAtPosition[position] = {
        bytes: Buffer.from(r.buf.subarray(start, end)),
        json: Buffer.from(out.data.subarray(jsonStart, out.size)),
        hits: 0,
        misses: 0,
      };
    }
  }

  /**
   * The AnyValue that ends at `end` as JSON; `depth` is its nesting level. An array or kvlist
   * past MAX_NESTING_DEPTH throws TooDeepError, which also bounds this recursion.
   */
  writeAnyValue(r: ProtobufReader, end: number, out: ByteColumnBuilder, depth: number): void {
    let written = false;
    while (r.pos < end) {
      const t = r.tag();
      if (written) {
        // A oneof set twice: protobuf keeps the last; ours is already written, so skip the rest.
        r.skipField(t);
        continue;
      }
      written = true;
      switch (t) {
        case STRING_VALUE: {
          const stringEnd = r.lengthDelimited();
          out.writeJsonString(r.buf, r.pos, stringEnd);
          r.pos = stringEnd;
          break;
        }
        case BOOL_VALUE:
          out.writeAscii(r.uint32() !== 0 ? 'true' : 'false');
          break;
        case INT_VALUE:
          out.writeAscii(r.int64Text());
          break;
        case DOUBLE_VALUE: {
          const d = r.double();
          out.writeAscii(Number.isFinite(d) ? String(d) : `"${d}"`);
          break;
        }
        case ARRAY_VALUE:
          this.writeArrayValue(r, out, depth);
          break;
        case KVLIST_VALUE:
          this.writeKeyValueList(r, out, depth);
          break;
        case BYTES_VALUE:
          out.writeAscii(`"${r.base64()}"`);
          break;
        default:
          r.skipField(t);
          written = false;
      }
    }
    if (!written) out.writeAscii('null');
  }

  /** An ArrayValue (the field whose tag was just read) as a JSON array. */
  private writeArrayValue(r: ProtobufReader, out: ByteColumnBuilder, depth: number): void {
    if (depth > MAX_NESTING_DEPTH) throw new TooDeepError('a value');
    const listEnd = r.lengthDelimited();
    let count = 0;
    out.writeByte(0x5b);
    while (r.pos < listEnd) {
      const t = r.tag();
      if (t === ARRAY_VALUE_VALUES) {
        if (count++ > 0) out.writeByte(0x2c);
        this.writeAnyValue(r, r.lengthDelimited(), out, depth + 1);
      } else r.skipField(t);
    }
    out.writeByte(0x5d);
  }

  /** A KeyValueList (the field whose tag was just read) as a JSON object. */
  private writeKeyValueList(r: ProtobufReader, out: ByteColumnBuilder, depth: number): void {
    if (depth > MAX_NESTING_DEPTH) throw new TooDeepError('a value');
    const listEnd = r.lengthDelimited();
    let count = 0;
    out.writeByte(0x7b);
    while (r.pos < listEnd) {
      const t = r.tag();
      if (t === KEY_VALUE_LIST_VALUES) {
        if (count++ > 0) out.writeByte(0x2c);
        this.writeKeyValue(r, r.lengthDelimited(), out, undefined, UNTRACKED_POSITION, depth + 1);
      } else r.skipField(t);
    }
    out.writeByte(0x7d);
  }

  private writeKeyValueOnce(
    r: ProtobufReader,
    end: number,
    out: ByteColumnBuilder,
    found: Found | undefined,
    position: number,
    depth: number,
  ): Key {
    let key = EMPTY_KEY; // proto3 leaves an empty key off the wire
    let valueStart = -1;
    let valueEnd = -1;
    while (r.pos < end) {
      const t = r.tag();
      if (t === KEY_VALUE_KEY) key = this.readKey(r, r.lengthDelimited(), position);
      else if (t === KEY_VALUE_VALUE) {
        valueEnd = r.lengthDelimited();
        valueStart = r.pos;
        r.pos = valueEnd;
      } else r.skipField(t);
    }
    out.writeBytes(key.json);
    if (valueStart < 0) {
      out.writeAscii('null');
      return key;
    }
    r.pos = valueStart;
    try {
      this.writeAnyValue(r, valueEnd, out, depth);
    } catch (error) {
      throw depth === 1 && error instanceof TooDeepError
        ? new TooDeepError(`attribute ${JSON.stringify(key.text)}`)
        : error;
    }
    if (found && key.role !== null) {
      r.pos = valueStart;
      noteFound(found, key, scalarValue(r, valueEnd));
    }
    r.pos = end;
    return key;
  }

  private readKey(r: ProtobufReader, end: number, position: number): Key {
    const buf = r.buf;
    const start = r.pos;
    r.pos = end;
    const predicted = this.keyAtPosition[position];
    if (predicted !== undefined && predicted.bytes.length === end - start && sameBytes(predicted.bytes, buf, start))
      return predicted;
    let h = 0x811c9dc5 ^ (end - start);
    for (let i = start; i < end; i++) h = Math.imul(h ^ buf[i], 0x01000193);
    const bucket = this.keys.get(h);
    let key = bucket?.find((k) => k.bytes.length === end - start && sameBytes(k.bytes, buf, start));
    if (key === undefined) {
      key = newKey(Buffer.from(buf.subarray(start, end)));
      if (this.cachedKeys++ > MAX_CACHED_KEYS) {
        this.keys.clear();
        this.cachedKeys = 0;
      }
      if (bucket) bucket.push(key);
      else this.keys.set(h, [key]);
    }
    if (position < UNTRACKED_POSITION) this.keyAtPosition[position] = key;
    return key;
  }
}

function newKey(bytes: Buffer): Key {
  const text = bytes.toString('utf8');
  return { bytes, json: keyJson(bytes), text, role: ROLES[text] ?? null };
}

/**
 * `"key":` from the key's own bytes, so that a key with invalid UTF-8 reaches the column as it
 * came and is replaced (and counted) there with the other strings.
 */
function keyJson(bytes: Buffer): Buffer {
  const json = new ByteColumnBuilder();
  json.writeJsonString(bytes, 0, bytes.length);
  json.writeByte(0x3a);
  return Buffer.from(json.data.subarray(0, json.size));
}

function sameBytes(a: Buffer, b: Uint8Array, at: number): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[at + i]) return false;
  return true;
}

function noteFound(found: Found, key: Key, value: string | number | null): void {
  if (key.role === 'service') {
    if (typeof value === 'string') found.serviceName = value;
  } else noteAttribution(found.attribution, key.text, value);
}

/** A string or int AnyValue as a JS value (for attribution keys); null for other kinds. */
function scalarValue(r: ProtobufReader, end: number): string | number | null {
  let value: string | number | null = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t === STRING_VALUE) value = r.string();
    else if (t === INT_VALUE) value = Number(r.int64Text());
    else r.skipField(t);
  }
  return value;
}
