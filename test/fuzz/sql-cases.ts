import fc from 'fast-check';

/** One statement, or several, and whether any of them would change the store or reach outside it. */
export interface SqlCase {
  readonly sql: string;
  readonly forbidden: boolean;
  /** The body's `format`. */
  readonly format: string;
}

const RELATIONS = [
  'spans',
  'logs',
  'llm_calls',
  'rewards',
  'rollouts',
  'attempts',
  'resources',
  'workers',
  'state_history',
  'agl_meta',
  'derived_calls',
  'nope',
];
const COLUMNS = [
  '*',
  'count(*)',
  'span_id',
  'attributes',
  "attributes->>'gen_ai.system'",
  'name',
  'rollout_id',
  'input_messages',
  'hash(attributes)',
];
const ODD_LITERALS = [
  '\ud800',
  '\u0000',
  '\uffff',
  "'; DROP TABLE spans; --",
  '\u{1F600}',
  'x'.repeat(100_000),
  '*/',
  '$$',
];

const relation = fc.constantFrom(...RELATIONS);
const literal = fc
  .oneof(fc.string({ maxLength: 8 }), fc.constantFrom(...ODD_LITERALS))
  .map((text) => `'${text.replace(/'/g, "''")}'`);
const predicate = fc.oneof(
  fc.constant('true'),
  literal.map((l) => `name = ${l}`),
  fc.tuple(fc.constantFrom(...COLUMNS.slice(2)), literal).map(([c, l]) => `${c}::VARCHAR LIKE ${l}`),
  fc.integer().map((n) => `sequence_id > ${n}`),
);

/** Queries that only read (they may still be refused: unknown tables, table functions, bad syntax). */
const readQuery: fc.Arbitrary<string> = fc.oneof(
  fc
    .tuple(fc.constantFrom(...COLUMNS), relation, predicate, fc.nat({ max: 50 }))
    .map(([c, r, p, n]) => `SELECT ${c} FROM ${r} WHERE ${p} LIMIT ${n}`),
  relation.map((r) => `DESCRIBE ${r}`),
  relation.map((r) => `SUMMARIZE ${r}`),
  fc.constantFrom(
    'SHOW TABLES',
    'SELECT 1',
    'SELECT * FROM range(10)',
    'SELECT * FROM duckdb_tables()',
    'SELECT json_tree(attributes) FROM spans',
    'SELECT * FROM other.main.spans',
    'SELECT * FROM pragma_database_list()',
    'WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000) SELECT count(*) FROM r',
    "SELECT '\\ud800'::JSON",
    "SELECT json('[[[[[[[[[[1]]]]]]]]]]')",
    "SELECT json_extract('{\"a\":1}', '$.a')",
    'SELECT 1/0',
    "SELECT 'abc'::INTEGER",
    'SELECT [1,2][5]',
  ),
  fc.integer({ min: 1_000, max: 30_000 }).map((n) => `SELECT ${'1 + '.repeat(n)}1`),
  fc.constantFrom(500, 5_000).map((n) => `SELECT ${'('.repeat(n)}1${')'.repeat(n)}`),
);

/** Statements that change the store, its settings or reach files, extensions, the environment or other databases. */
const forbiddenQuery: fc.Arbitrary<string> = fc.oneof(
  relation.map((r) => `DELETE FROM ${r}`),
  relation.map((r) => `DROP TABLE ${r}`),
  relation.map((r) => `DROP VIEW ${r}`),
  fc.tuple(relation, literal).map(([r, l]) => `UPDATE ${r} SET name = ${l}`),
  fc.tuple(relation, literal).map(([r, l]) => `INSERT INTO ${r} (name) VALUES (${l})`),
  relation.map((r) => `INSERT INTO ${r} SELECT * FROM ${r}`),
  relation.map((r) => `ALTER TABLE ${r} ADD COLUMN x INTEGER`),
  relation.map((r) => `COPY ${r} TO '/tmp/agl-fuzz-copy.csv'`),
  relation.map((r) => `COPY ${r} FROM '/etc/passwd'`),
  relation.map((r) => `TRUNCATE ${r}`),
  relation.map((r) => `CREATE TABLE ${r}_x AS SELECT * FROM spans`),
  relation.map((r) => `CREATE OR REPLACE VIEW ${r} AS SELECT 1`),
  fc.constantFrom(
    "ATTACH '/tmp/agl-fuzz-attach.duckdb' AS other",
    "ATTACH ':memory:' AS m",
    'DETACH other',
    'INSTALL httpfs',
    'LOAD httpfs',
    'INSTALL shellfs FROM community',
    'PRAGMA enable_profiling',
    'PRAGMA threads=1',
    'SET threads = 1',
    'SET enable_external_access = true',
    'RESET ALL',
    'CHECKPOINT',
    'VACUUM',
    'BEGIN TRANSACTION',
    'COMMIT',
    'ROLLBACK',
    "EXPORT DATABASE '/tmp/agl-fuzz-export'",
    "IMPORT DATABASE '/tmp/agl-fuzz-export'",
    'CREATE SEQUENCE s',
    'CREATE MACRO m(a) AS a',
    'CREATE OR REPLACE MACRO agl_semconv_message(m) AS 1',
    'CALL pragma_database_size()',
    'CREATE SECRET (TYPE s3)',
    'USE memory',
    'CREATE SCHEMA x',
    'SELECT * FROM spans; DELETE FROM spans',
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM read_parquet('/tmp/x.parquet')",
    "SELECT * FROM query('DROP TABLE spans')",
    "SELECT getenv('HOME')",
    "SELECT current_setting('access_mode')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM 'http://127.0.0.1:1/x.csv'",
    "SELECT * FROM (SELECT * FROM read_blob('/etc/hostname'))",
    "SELECT (SELECT content FROM read_text('/etc/hostname'))",
    'WITH d AS (DELETE FROM spans RETURNING *) SELECT * FROM d',
    'SET access_mode = read_write',
  ),
);

/** Comments, case and spacing a guard that reads text would trip over. */
const disguise = fc.constantFrom(
  (sql: string) => sql,
  (sql: string) => `/* read only */ ${sql}`,
  (sql: string) => `${sql} -- SELECT`,
  (sql: string) => `-- comment\n${sql}`,
  (sql: string) => sql.toLowerCase(),
  (sql: string) => `\n\t ${sql} ;`,
  (sql: string) => `${sql};;`,
  (sql: string) => sql.replace(/ /g, '/**/'),
  (sql: string) => `\ufeff${sql}`,
);

const statement = fc.oneof(
  readQuery.map((sql) => ({ sql, forbidden: false })),
  forbiddenQuery.map((sql) => ({ sql, forbidden: true })),
);

export const sqlCases: fc.Arbitrary<SqlCase> = fc
  .record({
    parts: fc.oneof(
      { weight: 3, arbitrary: statement.map((part) => [part]) },
      { weight: 1, arbitrary: fc.array(statement, { minLength: 2, maxLength: 3 }) },
    ),
    disguise,
    format: fc.constantFrom('json', 'json', 'json', 'csv', 'ndjson', 'parquet', 'xml'),
  })
  .map(({ parts, disguise, format }) => ({
    sql: disguise(parts.map((part) => part.sql).join('; ')),
    forbidden: parts.some((part) => part.forbidden),
    format,
  }));
