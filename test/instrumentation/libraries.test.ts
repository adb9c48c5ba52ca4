import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConfigError, LIBRARY_INSTRUMENTATIONS, readConfig } from '../../src/instrumentation/config.js';
import { newTempDir, queryRows, removeDir, ROOT, startAgl, type InProcessAgl } from '../support/helpers.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';
import { startPostgres, type PostgresCluster } from '../support/postgres.js';

// The libraries an agent's tools use, recorded by OpenTelemetry's auto-instrumentations under
// agl/register: a tool's PostgreSQL query (the real `pg` client, a real server) is a span under
// the tool's, in the rollout, while agl's fetch capture stays the one recorder of LLM calls.

let dir: string;
let agl: InProcessAgl;
let llm: OpenAITestServer;
let postgres: PostgresCluster;

before(async () => {
  dir = await newTempDir();
  [agl, llm, postgres] = await Promise.all([startAgl(`${dir}/agl.duckdb`), startOpenAITestServer(), startPostgres()]);
});
after(async () => {
  await Promise.all([llm.close(), postgres.stop()]);
  await agl.close();
  await removeDir(dir);
});

interface RestSpan {
  readonly span_id: string;
  readonly parent_id: string | null;
  readonly name: string;
  readonly attributes: Record<string, unknown>;
}

describe('an agent whose tool queries PostgreSQL, under agl/register', () => {
  test("the query is a span under the tool's, in the rollout the dashboard shows", async () => {
    const run = await runApp('pg-tool-agent.mjs', {
      AGL_ENDPOINT: agl.url,
      OPENAI_BASE_URL: llm.baseURL,
      DATABASE_URL: await postgres.createDatabase(),
      OTEL_SERVICE_NAME: 'pg-agent',
    });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), { orders: 1 });

    // What the dashboard's waterfall reads: the attempt's spans from the REST API.
    const answer = await fetch(
      `${agl.url}/v1/agl/spans?rollout_id=ro-pg&attempt_id=at-pg&limit=100&sort_by=start_time`,
    );
    const spans = ((await answer.json()) as { items: RestSpan[] }).items;
    const tool = spans.find((s) => s.name === 'agentlightning.operation');
    const query = spans.find((s) => s.name.startsWith('pg.query'));
    assert.ok(tool && query, JSON.stringify(spans.map((s) => s.name)));
    assert.equal(query.parent_id, tool.span_id);
    assert.match(String(query.attributes['db.query.text'] ?? query.attributes['db.statement']), /SELECT count/);

    // One row per LLM call: the package's openai and undici instrumentations are not started.
    const calls = await queryRows(agl.store, `SELECT count(*)::INTEGER AS n FROM llm_calls WHERE rollout_id = 'ro-pg'`);
    assert.equal(calls[0].n, 2);
    const scopes = await queryRows(agl.store, 'SELECT DISTINCT scope_name FROM spans ORDER BY scope_name');
    assert.deepEqual(
      scopes.map((row) => row.scope_name),
      ['@opentelemetry/instrumentation-pg', 'agl'],
    );
  });
});

describe('which instrumentations are on', () => {
  test("the I/O libraries and agl's own by default; fs, dns and net not", () => {
    const on = readConfig({}).instrumentations;
    for (const name of ['fetch', 'http', 'langchain', 'pg', 'redis', 'ioredis', 'mongodb', 'kafkajs', 'grpc'] as const)
      assert.ok(on.has(name), name);
    for (const name of ['fs', 'dns', 'net', 'host-metrics', 'runtime-node'] as const) assert.ok(!on.has(name), name);
  });

  test('OTEL_NODE_ENABLED_INSTRUMENTATIONS is all that is on; the disabled list is taken off', () => {
    const on = readConfig({
      OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'pg, fs,undici,redis',
      OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'redis',
    }).instrumentations;
    assert.deepEqual([...on].sort(), ['fetch', 'fs', 'pg']);
    const off = readConfig({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'pg,openai' }).instrumentations;
    assert.ok(!off.has('pg') && !off.has('fetch') && off.has('mysql2'));
  });

  test('an unknown name is an error naming it', () => {
    assert.throws(
      () => readConfig({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'pg,postgres' }),
      (error: Error) =>
        error instanceof ConfigError &&
        /^OTEL_NODE_DISABLED_INSTRUMENTATIONS: unknown instrumentation "postgres"/.test(error.message),
    );
  });

  test("every instrumentation of the installed package is agl's to switch", async () => {
    const manifest = join(ROOT, 'node_modules', '@opentelemetry', 'auto-instrumentations-node', 'package.json');
    const packaged = Object.keys(JSON.parse(await readFile(manifest, 'utf8')).dependencies as object)
      .filter((name) => name.startsWith('@opentelemetry/instrumentation-'))
      .map((name) => name.slice('@opentelemetry/instrumentation-'.length));
    assert.deepEqual(packaged.sort(), [...LIBRARY_INSTRUMENTATIONS, 'http', 'openai', 'undici'].sort());
  });
});
