import * as z from 'zod';

/**
 * Building blocks of the REST request schemas (requests.ts) and the one wording of their errors:
 * every message is the predicate of a sentence whose subject is the field's path ("must be a
 * string, not 5", "is required"); the server puts the path in front (collector/validate.ts).
 */

/** `text` cut to `max` characters: messages quote what clients sent, which may be megabytes. */
export const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}...` : text);

/** The problem with a value that is not `expected` ("an object"), or that is missing. */
export const mustBe =
  (expected: string) =>
  ({ input }: { input?: unknown }): string =>
    input === undefined ? 'is required' : `must be ${expected}, not ${clip(JSON.stringify(input) ?? 'undefined', 80)}`;

const TYPE_NAMES: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  boolean: 'true or false',
  object: 'an object',
  record: 'an object',
  array: 'a list',
};

/**
 * The problem of an issue zod found with its own checks (a wrong type, a value not in an enum, a
 * resource_type no resource has); schemas word their own checks with `mustBe`. An error map for
 * `safeParse`, which asks it for issues the schema did not word.
 */
export function problemOf(issue: z.core.$ZodRawIssue): string {
  if (issue.code === 'invalid_union' && typeof issue.discriminator === 'string') {
    // A discriminated union names the field it looked at, and the values it knows.
    const sent = (issue.input as Record<string, unknown>)[issue.discriminator];
    return mustBe(`one of ${(issue.options as unknown[]).join(', ')}`)({ input: sent });
  }
  if (issue.code === 'invalid_type') return mustBe(TYPE_NAMES[issue.expected] ?? issue.expected)(issue);
  if (issue.code === 'invalid_value') return mustBe(`one of ${issue.values.join(', ')}`)(issue);
  return mustBe('valid')(issue);
}

const isObject = (value: unknown) => typeof value === 'object' && value !== null && !Array.isArray(value);

/** A fresh {} (a default must not be shared: stores keep what they are given). */
export const emptyObject = (): Record<string, unknown> => ({});

/** A JSON object, passed on as it is (a record schema would copy it, and drop a "__proto__" key). */
export const jsonObject = z.custom<Record<string, unknown>>(isObject, { error: mustBe('an object') });

/** A number's decimal text as the number (query parameters are text); other text stays text, to be quoted. */
function decimalText(value: unknown): unknown {
  if (typeof value !== 'string' || value.trim() === '') return value;
  const number = Number(value);
  return Number.isFinite(number) ? number : value;
}

/** A number or its decimal text, in a range; an integer must be a safe one (JSON's 1e300 is not). */
export function numberIn({ integer = false, min = -Infinity, max = Infinity } = {}) {
  const range = [min > -Infinity ? `at least ${min}` : '', max < Infinity ? `at most ${max}` : '']
    .filter(Boolean)
    .join(' and ');
  const error = mustBe(`${integer ? 'an integer' : 'a number'}${range ? ` of ${range}` : ''}`);
  let schema: z.ZodNumber = integer ? z.int({ error }) : z.number({ error });
  if (min > -Infinity) schema = schema.min(min, { error });
  if (max < Infinity) schema = schema.max(max, { error });
  return z.preprocess(decimalText, schema);
}

/** Absent or null: absent (the field keeps its default). */
export const optional = <T extends z.ZodType>(schema: T) =>
  schema
    .nullish()
    .transform((value) => value ?? undefined)
    .optional();

/** Absent or null: the value `fallback` makes. */
export const orElse = <T extends z.ZodType, F>(schema: T, fallback: () => F) =>
  schema.nullish().transform((value) => value ?? fallback());

const notNullValue: z.ZodType<unknown, unknown> = z
  .unknown()
  .refine((value) => value !== null, { error: 'is invalid; it cannot be a null value', abort: true });

/** May be absent (unchanged) but not null: Agent Lightning's update rule for statuses and config. */
export const notNull = <T extends z.ZodType>(schema: T) => notNullValue.pipe(schema).optional();

/** A list, or one item for a list of one (a query parameter given once); null or absent: absent. */
export const listOf = <T extends z.ZodType>(item: T) =>
  z
    .preprocess(
      (value): unknown =>
        value === null || value === undefined || Array.isArray(value) ? (value ?? undefined) : [value],
      z.array(item).optional(),
    )
    .optional();

/** A string that is not empty: an id the route cannot do without. */
export const requiredText = z.string().min(1, { error: () => 'is required' });
