/**
 * Protobuf's wire format (https://protobuf.dev/programming-guides/encoding/): a field is a tag,
 * its number and wire type, then its value. The wire type follows from the field's .proto type.
 */

/** int32, int64, uint32, bool, enum. */
export const VARINT = 0;
/** fixed64, double. */
export const FIXED64 = 1;
/** string, bytes, embedded messages, packed repeated fields. */
export const LEN = 2;
/** fixed32, float. */
export const FIXED32 = 5;

/** The tag of field number `field` with `wireType`, as it precedes the field's value. */
export const tag = (field: number, wireType: number): number => (field << 3) | wireType;
