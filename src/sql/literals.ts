/**
 * A string as a SQL literal. DuckDB's parser ends a statement at a NUL character, so one inside
 * the string is written as chr(0) (a literal holding it was an "unterminated quoted string").
 */
export const sqlText = (value: string): string => {
  const quoted = `'${value.replaceAll("'", "''")}'`;
  return value.includes('\0') ? `(${quoted.replaceAll('\0', "' || chr(0) || '")})` : quoted;
};

/** Whether `mode` can be a rollout mode (train, val, test, or a word of the user's): safe as a SQL literal. */
export const isRolloutMode = (mode: string): boolean => /^[\w-]+$/.test(mode);

/** The SQL condition `column = mode`, for a checked rollout mode. */
export function rolloutModeCondition(column: string, mode: string): string {
  if (!isRolloutMode(mode)) throw new TypeError(`rolloutMode must be a word such as train or val, not "${mode}"`);
  return `${column} = '${mode}'`;
}

/** A SQL string literal holding a regular expression that both JS and DuckDB (RE2) accept. */
export function sqlRegex(pattern: string): string {
  try {
    new RegExp(pattern);
  } catch (error) {
    throw new TypeError(`not a regular expression: ${pattern} (${(error as Error).message})`);
  }
  return sqlText(pattern);
}
