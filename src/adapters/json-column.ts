/** A JSON column's value as it comes back: parsed already (embedded store) or as text (some routes). */
export const jsonValue = (value: unknown): unknown => (typeof value === 'string' ? JSON.parse(value) : value);
