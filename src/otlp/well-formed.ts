/**
 * Text decoded from UTF-8 is well-formed; only a \uD800-\uDFFF escape can make JSON.parse
 * return a lone surrogate, which DuckDB's JSON functions (and so every view and export) refuse
 * to read back once the value is stored. Bodies without such an escape skip the walk below.
 */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/**
 * Replaces lone surrogates with U+FFFD in the strings and keys of `parsed`, in place, where
 * `text` (the JSON it was parsed from) may hold any. Returns how many strings changed.
 * Iterative, so that a value nested deeper than the stack allows is walked, not a crash.
 */
export function replaceLoneSurrogates(text: string, parsed: unknown): number {
  if (!SURROGATE_ESCAPE.test(text) || parsed === null || typeof parsed !== 'object') return 0;
  let replaced = 0;
  const stack: object[] = [parsed];
  while (stack.length > 0) {
    const node = stack.pop() as Record<string, unknown>;
    for (const key of Object.keys(node)) {
      let value = node[key];
      if (typeof value === 'string' && !value.isWellFormed()) {
        value = node[key] = value.toWellFormed();
        replaced++;
      } else if (value !== null && typeof value === 'object') stack.push(value);
      if (!key.isWellFormed()) {
        delete node[key];
        node[key.toWellFormed()] = value;
        replaced++;
      }
    }
  }
  return replaced;
}

/**
 * JSON text as DuckDB can read it back: `text` with its lone surrogate escapes replaced by
 * U+FFFD (parsed and written again only when it holds such an escape; text that is not JSON
 * is returned as it is).
 */
export function wellFormedJsonText(text: string): string {
  if (!SURROGATE_ESCAPE.test(text)) return text;
  try {
    const parsed: unknown = JSON.parse(text);
    return replaceLoneSurrogates(text, parsed) > 0 ? JSON.stringify(parsed) : text;
  } catch {
    return text;
  }
}
