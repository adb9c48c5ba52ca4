/** A string as a SQL literal. */
export const sqlText = (value: string) => `'${value.replaceAll("'", "''")}'`;
