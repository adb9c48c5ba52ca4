/**
 * How deep a stored JSON value may nest: OTLP attribute values and log bodies, and the JSON
 * fields of REST bodies (rollout input, metadata, resources, span attributes ...). A deeper
 * value is refused where it enters (400, or an OTLP item rejected through partial_success), so
 * that no reader of the store (DuckDB's JSON functions, the views, JSON.stringify in exports)
 * meets a value nested thousands deep. Agent data nests a handful of levels; 64 leaves room.
 */
export const MAX_NESTING_DEPTH = 64;

/**
 * The path of the first place in `value` nested deeper than `maxDepth` (objects and arrays
 * count one level each, the value itself is level 1), or null when there is none. Iterative,
 * so that a value nested far deeper than the stack allows is measured, not a crash.
 */
export function tooDeepAt(value: unknown, maxDepth = MAX_NESTING_DEPTH): string | null {
  const stack: { value: unknown; depth: number; path: string }[] = [{ value, depth: 1, path: '' }];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const { value: item, depth, path } = next;
    if (item === null || typeof item !== 'object') continue;
    if (depth > maxDepth) return path;
    if (Array.isArray(item))
      for (const [i, child] of item.entries()) stack.push({ value: child, depth: depth + 1, path: `${path}[${i}]` });
    else
      for (const [key, child] of Object.entries(item))
        stack.push({ value: child, depth: depth + 1, path: `${path}.${key}` });
  }
  return null;
}

/**
 * A value nested deeper than MAX_NESTING_DEPTH met while decoding, naming the field (an
 * attribute's key, a log body): the item holding it is refused, the rest of the request is not.
 */
export class TooDeepError extends Error {
  constructor(readonly field: string) {
    super(`${field} is nested deeper than ${MAX_NESTING_DEPTH} levels`);
    this.name = 'TooDeepError';
  }
}

/**
 * Whether JSON `text` nests deeper than `maxDepth`, read from the text (no parse, no recursion):
 * for a reader that would otherwise overflow its stack on it (JSON.parse's reviver, JSON.stringify).
 */
export function jsonTextTooDeep(text: string, maxDepth = MAX_NESTING_DEPTH): boolean {
  if (text.length <= 2 * maxDepth) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}
