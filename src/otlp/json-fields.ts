/** The fields of a JSON object; a body's parts are unknown until a check says otherwise. */
export type Fields = Record<string, unknown>;

export const isFields = (value: unknown): value is Fields => typeof value === 'object' && value !== null;

/** The fields of `value` when it is an object, else none (a part missing or malformed). */
export const fieldsOf = (value: unknown): Fields => (isFields(value) ? value : {});

/** The objects of a list in a chunk (`choices`, `tool_calls`); none when it is not a list. */
export const objectsIn = (value: unknown): Fields[] => (Array.isArray(value) ? value.map(fieldsOf) : []);

/** Copies the fields of a chunk that are present (later chunks win). */
export function keepPresent(target: Fields, chunk: Fields, keys: readonly string[]): void {
  for (const key of keys) {
    if (chunk[key] !== undefined && chunk[key] !== null) target[key] = chunk[key];
  }
}
