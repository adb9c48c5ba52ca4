import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  FIXTURES,
  post,
  runCli,
  startAgl,
  newTempDir,
  removeDir,
  until,
  type InProcessAgl,
} from '../support/helpers.js';
import type { QueryResult } from '../../src/api/query.js';

let dir: string;
let agl: InProcessAgl;
before(async () => {
  dir = await newTempDir();
  agl = await startAgl(join(dir, 'query.duckdb'), { queryTimeoutMs: 1500 });
  const body = await readFile(join(FIXTURES, 'traces.pb'));
  assert.equal((await post(`${agl.url}/v1/traces`, body, { 'content-type': 'application/x-protobuf' })).status, 200);
});
after(async () => {
  await agl.close();
  await removeDir(dir);
});

/** What the query route answers: a result, or the detail of a refusal. */
type QueryAnswer = Partial<QueryResult> & { detail?: string };

async function queryApi(body: unknown): Promise<{ status: number; json: QueryAnswer }> {
  const response = await fetch(`${agl.url}/v1/agl/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as QueryAnswer };
}

test('POST /v1/agl/query answers columns and row objects, 64-bit integers exact', async () => {
  const { status, json } = await queryApi({
    sql: "SELECT name, sequence_id, attributes->'big' AS big, 9007199254740993::BIGINT AS huge FROM spans WHERE name = 'op.0.0.0' AND rollout_id = 'ro-fixture1'",
  });
  assert.equal(status, 200);
  assert.deepEqual(json.columns, [
    { name: 'name', type: 'VARCHAR' },
    { name: 'sequence_id', type: 'BIGINT' },
    { name: 'big', type: 'JSON' },
    { name: 'huge', type: 'BIGINT' },
  ]);
  assert.equal(json.rows?.length, 1);
  assert.equal(typeof json.rows?.[0].sequence_id, 'number');
  assert.equal(json.rows?.[0].huge, '9007199254740993', 'an integer beyond 2^53 comes as a string');
});

test('statements that write, attach, copy, install or read files are refused with a 400 that says why', async () => {
  const refused: [string, RegExp][] = [
    ['INSERT INTO spans SELECT * FROM spans', /only read-only queries/],
    ['DELETE FROM spans', /only read-only queries/],
    ["COPY spans TO '/tmp/agl-stolen.csv'", /only read-only queries/],
    ["ATTACH '/tmp/other.duckdb' AS other", /only read-only queries/],
    ['INSTALL httpfs', /only read-only queries/],
    ['LOAD httpfs', /only read-only queries/],
    ["SELECT * FROM read_csv('/etc/passwd')", /table function read_csv\(\) is not allowed/],
    ["SELECT * FROM '/etc/passwd'", /not a table of the store/],
    ["SELECT * FROM query('DELETE FROM spans')", /table function query\(\) is not allowed/],
    ["SELECT getenv('HOME')", /getenv\(\) is not allowed/],
    ['SELECT 1; SELECT 2', /exactly one statement/],
    ['', /empty/],
  ];
  for (const [sql, message] of refused) {
    const { status, json } = await queryApi({ sql });
    assert.equal(status, 400, sql);
    assert.match(String(json.detail), message, sql);
  }
  const { json } = await queryApi({ sql: 'SELECT count(*) AS n FROM spans' });
  assert.ok(Number(json.rows?.[0].n) > 0, 'nothing was harmed');
});

test('read-only queries of every shape users write are allowed', async () => {
  for (const sql of [
    'DESCRIBE spans',
    'SHOW TABLES',
    'SUMMARIZE spans',
    'WITH s AS (SELECT * FROM spans) SELECT count(*) FROM s',
    'SELECT * FROM range(3)',
    'SELECT key FROM spans, json_each(attributes) LIMIT 1',
    'SELECT tag, memory_usage_bytes FROM duckdb_memory() ORDER BY memory_usage_bytes DESC',
    'SELECT count(*) FROM duckdb_temporary_files()',
  ]) {
    const { status, json } = await queryApi({ sql });
    assert.equal(status, 200, `${sql}: ${JSON.stringify(json)}`);
  }
});

test('a query over its time limit is stopped with a 408', async () => {
  const { status, json } = await queryApi({ sql: 'SELECT count(*) FROM range(100000000000) t(x) WHERE x % 7 = 3' });
  assert.equal(status, 408);
  assert.match(String(json.detail), /longer than 1.5 s .*--query-timeout/);
  assert.equal((await queryApi({ sql: 'SELECT 1 AS one' })).json.rows?.[0].one, 1);
});

test('a query stuck in one long function call is answered 408 at its limit, not when the call ends', async () => {
  // One scalar call DuckDB cannot interrupt, some 5 s of CPU (the repeat('x', 3e9) took
  // 45 s and 3 GB). The 408 must not wait for it.
  const { status, json } = await queryApi({ sql: "SELECT levenshtein(repeat('a', 50000), repeat('b', 50000)) AS d" });
  assert.equal(status, 408);
  assert.match(String(json.detail), /longer than 1.5 s/);
  // The call still runs after the 408 (so the 408 did not wait for it), holding one of the
  // threads every DuckDB call shares: other queries are refused until it ends.
  const meanwhile = await queryApi({ sql: 'SELECT 1 AS one' });
  assert.equal(meanwhile.status, 503);
  assert.match(String(meanwhile.json.detail), /still finishing/);
  await until(async () => assert.equal((await queryApi({ sql: 'SELECT 1 AS one' })).json.rows?.[0].one, 1), 120_000);
});

test('bad SQL and bad bodies are 400s naming the problem', async () => {
  const unknownColumn = await queryApi({ sql: 'SELECT nope FROM spans' });
  assert.equal(unknownColumn.status, 400);
  assert.match(String(unknownColumn.json.detail), /nope/);
  assert.equal((await queryApi({ query: 'SELECT 1' })).status, 400);
  const badFormat = await queryApi({ sql: 'SELECT 1', format: 'xlsx' });
  assert.equal(badFormat.status, 400);
  assert.match(String(badFormat.json.detail), /"format" must be/);
});

test('agl query prints an aligned table, CSV, JSON and NDJSON', async () => {
  const sql = "SELECT name, kind FROM spans WHERE rollout_id = 'ro-fixture1' ORDER BY name LIMIT 2";
  const table = await runCli(['query', sql, '--url', agl.url]);
  assert.equal(table.code, 0, table.stderr);
  assert.equal(
    table.stdout,
    ['name     │ kind', '─────────┼─────────', 'op.0.0.0 │ INTERNAL', 'op.0.0.1 │ SERVER', '(2 rows)', ''].join('\n'),
  );
  const csv = await runCli(['query', sql, '--url', agl.url, '--format', 'csv']);
  assert.equal(csv.stdout, 'name,kind\r\nop.0.0.0,INTERNAL\r\nop.0.0.1,SERVER\r\n');
  const json = await runCli(['query', sql, '--url', agl.url, '--format', 'json']);
  assert.deepEqual(JSON.parse(json.stdout), [
    { name: 'op.0.0.0', kind: 'INTERNAL' },
    { name: 'op.0.0.1', kind: 'SERVER' },
  ]);
  const ndjson = await runCli(['query', sql, '--url', agl.url, '--format', 'ndjson']);
  assert.deepEqual(
    ndjson.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line)),
    JSON.parse(json.stdout),
  );
});

test('agl query --out exports Parquet, CSV and JSON through the server, types intact', async () => {
  const sql = 'SELECT span_id, start_time, attributes FROM spans ORDER BY span_id';
  for (const ext of ['parquet', 'csv', 'json']) {
    const out = join(dir, `export.${ext}`);
    const result = await runCli(['query', sql, '--url', agl.url, '--out', out]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /wrote/);
  }
  // Read the exports back with DuckDB itself, through a read-only open of another file.
  const check = await startAgl(join(dir, 'reader.duckdb'));
  try {
    const parquet = await check.store.query(
      `SELECT typeof(start_time) AS t, count(*) AS n FROM '${join(dir, 'export.parquet')}' GROUP BY ALL`,
      { guard: false },
    );
    const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
    assert.deepEqual(parquet.rows, [{ t: 'TIMESTAMP_NS', n: rows[0].n }]);
  } finally {
    await check.close();
  }
  const json = JSON.parse(await readFile(join(dir, 'export.json'), 'utf8'));
  assert.equal(json.length, (await agl.store.query('SELECT count(*) AS n FROM spans')).rows[0].n);
  assert.match(await readFile(join(dir, 'export.csv'), 'utf8'), /^span_id,start_time,attributes\r?\n/);
});

test('agl query names what is wrong with its arguments', async () => {
  const noSql = await runCli(['query', '--url', agl.url]);
  assert.equal(noSql.code, 2);
  assert.match(noSql.stderr, /give the SQL as one argument/);
  const badFormat = await runCli(['query', 'SELECT 1', '--url', agl.url, '--format', 'xml']);
  assert.equal(badFormat.code, 2);
  assert.match(badFormat.stderr, /--format must be one of table, csv, json, ndjson/);
  const badOut = await runCli(['query', 'SELECT 1', '--url', agl.url, '--out', 'x.txt']);
  assert.match(badOut.stderr, /--out must end in/);
  const noDb = await runCli(['query', 'SELECT 1', '--db', join(dir, 'missing.duckdb')]);
  assert.equal(noDb.code, 2);
  assert.match(noDb.stderr, /no database at/);
  const refused = await runCli(['query', 'DROP TABLE spans', '--url', agl.url]);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /the query failed \(400\): only read-only queries/);
  const unknownOption = await runCli(['query', 'SELECT 1', '--colour']);
  assert.equal(unknownOption.code, 2);
  assert.match(unknownOption.stderr, /unknown option --colour/);
});
