/**
 * JSON.parse that keeps integers beyond 2^53 exact: they come back as raw JSON values, which
 * JSON.stringify writes out digit for digit (and `String()` or `BigInt()` read exactly).
 * Plain JSON.parse is used when the text holds no long number literal, which is the usual case
 * (a long run of digits inside a string, such as an OTLP/JSON time, is none).
 */
interface RawJson {
  readonly rawJSON: string;
}
type ReviverContext = { source?: string };
/** JSON as Node has it: rawJSON and the reviver's source context (ES2025), not in TypeScript's lib yet. */
const json = JSON as JSON & {
  rawJSON(text: string): RawJson;
  parse(text: string, reviver: (key: string, value: unknown, context: ReviverContext) => unknown): unknown;
};

/** A number literal of 16 digits or more: in value position, not inside a string (OTLP/JSON sends its nanosecond times as strings). */
const LONG_NUMBER = /(?:^|[:[,])\s*-?\d{16}/;

export function parseJsonExact(text: string): unknown {
  if (!LONG_NUMBER.test(text)) return JSON.parse(text);
  try {
    return json.parse(text, exactInteger);
  } catch (error) {
    // The reviver's walk recurses and plain JSON.parse does not: a value nested thousands deep
    // (an agent's odd tool argument) is read whole, its long integers as the nearest doubles.
    if (error instanceof RangeError) return JSON.parse(text);
    throw error;
  }
}

const exactInteger = (_key: string, value: unknown, context: ReviverContext) =>
  typeof value === 'number' &&
  !Number.isSafeInteger(value) &&
  context.source !== undefined &&
  /^-?\d+$/.test(context.source)
    ? json.rawJSON(context.source)
    : value;

/** The exact decimal text of a number that `parseJsonExact` returned (plain or raw). */
export function integerText(value: unknown): string | null {
  if (typeof value === 'number' && Number.isInteger(value)) return String(value);
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string' && /^-?\d+$/.test(value)) return value;
  if (value !== null && typeof value === 'object' && 'rawJSON' in value) return String((value as RawJson).rawJSON);
  return null;
}
