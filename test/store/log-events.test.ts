import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spanRows } from '../../src/store/span-json.js';
import { span } from '../support/span-fixtures.js';
import { post, queryRows, startAgl, tempDir, type InProcessAgl, LLM_CALLS_SEARCH_PATH } from '../support/helpers.js';

// While no GenAI log event is stored, reads plan llm_calls and rewards without the SQL that
// reads log records (src/sql/derived.ts, NO_LOG_EVENTS_SCHEMA); once one is, whenever it came,
// its call and evaluation are read.

const json = { 'content-type': 'application/json' };
const text = (value: string) => ({ stringValue: value });

/** OTLP/JSON log records tied to the span `spanId` of trace `traceId`. */
function logRecords(
  traceId: string,
  spanId: string,
  records: { eventName?: string; body: object; attributes?: object[] }[],
) {
  const time = String(BigInt(Date.now()) * 1_000_000n);
  return JSON.stringify({
    resourceLogs: [
      {
        resource: { attributes: [] },
        scopeLogs: [{ logRecords: records.map((record) => ({ timeUnixNano: time, traceId, spanId, ...record })) }],
      },
    ],
  });
}

const searchPath = async (agl: InProcessAgl) => String((await queryRows(agl.store, LLM_CALLS_SEARCH_PATH))[0].path);

test('a GenAI log event stored after the deriver passed plain log records is read at once, and stays read', async (t) => {
  const agl = await startAgl(`${await tempDir(t)}/events.duckdb`, { deriveWhenIdleMs: Number.POSITIVE_INFINITY });
  t.after(() => agl.close());
  // A chat span whose content comes as log events (no operation name: without them, no call).
  const chat = span({
    name: 'chat gpt-events',
    start: 1,
    end: 2,
    rollout_id: 'ro-e',
    attributes: { 'gen_ai.system': 'openai', 'gen_ai.request.model': 'gpt-events' },
  });
  await agl.store.writeSpans(spanRows(chat), 0);
  const plain = logRecords(chat.trace_id, chat.span_id, [{ body: text('an application log line') }]);
  assert.equal((await post(`${agl.url}/v1/logs`, plain, json)).status, 200);
  await agl.store.deriveAll();
  const calls = `SELECT model, input_messages, output_messages FROM llm_calls WHERE rollout_id = 'ro-e'`;
  const rewards = `SELECT name, value FROM rewards WHERE rollout_id = 'ro-e'`;
  assert.equal(await searchPath(agl), 'own_calls_only,derived_only,no_log_events,main');
  assert.deepEqual(await queryRows(agl.store, calls), []);
  const [{ after }] = await queryRows(agl.store, "SELECT value AS after FROM agl_meta WHERE key = 'log_events_after'");
  assert.ok(Number(after) >= 0, 'the deriver passed the plain log record');

  const events = logRecords(chat.trace_id, chat.span_id, [
    { eventName: 'gen_ai.user.message', body: { kvlistValue: { values: [{ key: 'content', value: text('q') }] } } },
    {
      eventName: 'gen_ai.choice',
      body: {
        kvlistValue: {
          values: [
            { key: 'index', value: { intValue: '0' } },
            { key: 'message', value: { kvlistValue: { values: [{ key: 'content', value: text('a') }] } } },
          ],
        },
      },
    },
    {
      eventName: 'gen_ai.evaluation.result',
      body: { stringValue: '' },
      attributes: [
        { key: 'gen_ai.evaluation.name', value: text('relevance') },
        { key: 'gen_ai.evaluation.score.value', value: { doubleValue: 0.75 } },
      ],
    },
  ]);
  assert.equal((await post(`${agl.url}/v1/logs`, events, json)).status, 200);
  const expected = {
    calls: [
      {
        model: 'gpt-events',
        input_messages: [{ role: 'user', content: 'q' }],
        output_messages: [{ role: 'assistant', content: 'a' }],
      },
    ],
    rewards: [{ name: 'relevance', value: 0.75 }],
  };
  const read = async () => ({ calls: await queryRows(agl.store, calls), rewards: await queryRows(agl.store, rewards) });
  assert.equal(await searchPath(agl), 'derived_only,main');
  assert.deepEqual(await read(), expected);
  // A later round stops before the first GenAI log event: it is read on.
  await agl.store.writeSpans(spanRows(span({ name: 'later', start: 3, end: 4, rollout_id: 'ro-f' })), 0);
  await agl.store.deriveAll();
  assert.deepEqual(await queryRows(agl.store, "SELECT value AS after FROM agl_meta WHERE key = 'log_events_after'"), [
    { after },
  ]);
  assert.equal(await searchPath(agl), 'derived_only,main');
  assert.deepEqual(await read(), expected);
});
