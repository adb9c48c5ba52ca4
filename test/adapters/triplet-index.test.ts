import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { allRows } from '../../src/adapters/source.js';
import { traceToTriplets, tripletsQuery, tripletsSql, type Triplet } from '../../src/adapters/triplets.js';
import { spanRows, type SpanInput } from '../../src/store/span-json.js';
import { finishRows, newLogRows } from '../../src/otlp/batch.js';
import { DuckDBStore } from '../../src/store/store.js';
import { LOG } from '../../src/otlp/span-columns.js';
import { newTempDir, removeDir } from '../support/helpers.js';
import { call, reward, span } from '../support/span-fixtures.js';

// The deriver keeps each call's answer to a default triplet export (its group, whether it
// counts, its agent and reward) and keeps the calls grouped by attempt, so that such an export
// is a plain scan. Spans that come late (an agent or parent span after its calls, a reward, a
// retried call, the gateway's record of a call) must leave it exactly what the spans give.

let dir: string;
let store: DuckDBStore;
const source = { stream: (sql: string) => store.streamQuery(sql, { guard: false }) };

/** A call as OpenLLMetry records it (another dialect than agl's capture), answered by `responseId`. */
const instrumentedCall = (question: string, responseId: string, fields: Partial<SpanInput> & { trace: number }) =>
  span({
    name: 'openai.chat',
    start: 1,
    end: 2,
    attributes: {
      'gen_ai.system': 'openai',
      'gen_ai.request.model': 'm',
      'gen_ai.response.id': responseId,
      'gen_ai.prompt.0.role': 'user',
      'gen_ai.prompt.0.content': question,
      'gen_ai.completion.0.role': 'assistant',
      'gen_ai.completion.0.content': question.toUpperCase(),
    },
    ...fields,
  });

const agentSpan = (name: string, fields: Partial<SpanInput> & { trace: number }) =>
  span({ name: `agent ${name}`, start: 0, end: 100, attributes: { 'agent.name': name }, ...fields });

/** The spans, in the batches they arrive in; the store derives after each. */
function batches(): SpanInput[][] {
  const a = { rollout_id: 'ro-a', trace: 21 };
  const planner = agentSpan('planner', a);
  const b = { rollout_id: 'ro-b', trace: 22 };
  const coder = agentSpan('coder', b);
  const tool = span({ name: 'tool', start: 1, end: 50, parent_id: coder.span_id, ...b });
  const t = { rollout_id: null, attempt_id: null, trace: 23 };
  const c = { rollout_id: 'ro-c', trace: 24 };
  const capture = call('c1', 'C1', 1, { ...c, responseId: 'resp-c1' });
  const gateway = call('c1', 'C1', 1, { ...c, responseId: 'resp-c1', parent_id: capture.span_id });
  gateway.attributes = { ...gateway.attributes, 'agl.gateway': 'true' };
  // One call recorded twice, by an instrumentation and by agl's capture, in other attempts and
  // rounds (by its response id): the capture's row counts, whichever came first.
  const e = { rollout_id: 'ro-e', trace: 26 };
  const f = { rollout_id: 'ro-f', trace: 27 };
  const g = { rollout_id: 'ro-g', trace: 28 };
  const h = { rollout_id: 'ro-h', trace: 29 };
  return [
    [
      instrumentedCall('e1', 'resp-e1', e),
      call('g1', 'G1', 1, g),
      call('a1', 'A1', 1, { ...a, parent_id: planner.span_id }),
      call('b1', 'B1', 2, { ...b, parent_id: tool.span_id }),
      reward(1, 5, b),
      capture,
    ],
    [
      call('a2', 'A2', 3, { ...a, parent_id: planner.span_id }),
      reward(0.5, 6, a),
      call('t1', 'T1', 1, t),
      call('t2', 'T2', 3, t),
      gateway,
      call('e1', 'E1', 1, f),
    ],
    // a3 repeats a2's response (a retry): it counts once. The agents and the tool come last.
    [
      call('a3', 'A3', 4, { ...a, responseId: 'resp-a2', parent_id: planner.span_id }),
      planner,
      coder,
      tool,
      reward(0.25, 9, t),
      instrumentedCall('g1', 'resp-g1', h),
    ],
  ];
}
const arrivals = batches();

before(async () => {
  dir = await newTempDir();
  store = await DuckDBStore.open({ path: join(dir, 'index.duckdb'), deriveWhenIdleMs: Infinity });
  for (const spans of arrivals) {
    await store.writeSpans(spanRows(...spans), 0);
    assert.ok((await store.deriveAll()) > 0);
  }
});
after(async () => {
  await store.close();
  await removeDir(dir);
});

const groupOf = (t: Triplet) =>
  t.metadata.rollout_id ? `${t.metadata.rollout_id}/${t.metadata.attempt_id}` : `trace:${t.metadata.trace_id}`;

/** Triplets by attempt, each attempt's in its order; fails unless each attempt's triplets come together. */
function byAttempt(triplets: Triplet[]): Map<string, Triplet[]> {
  const groups = new Map<string, Triplet[]>();
  let last: string | undefined;
  for (const triplet of triplets) {
    const group = groupOf(triplet);
    if (group !== last) assert.ok(!groups.has(group), `the triplets of ${group} come together`);
    groups.set(group, [...(groups.get(group) ?? []), triplet]);
    last = group;
  }
  return groups;
}

test('a derived store exports default triplets by a scan, the same as computed from the spans', async () => {
  assert.match(await tripletsQuery(source), /FROM derived_calls c WHERE c.in_triplets$/);
  const scanned = await traceToTriplets(source);
  const computed = (await allRows(source, tripletsSql())) as Triplet[];
  assert.deepEqual(byAttempt(scanned), byAttempt(computed));
  const summary = [...byAttempt(scanned)].map(([group, triplets]) => [
    group,
    triplets.map((t) => [(t.prompt.messages as { content: string }[])[0].content, t.metadata.agent_name, t.reward]),
  ]);
  assert.deepEqual(
    new Map(summary as [string, unknown][]),
    new Map<string, unknown>([
      [
        'ro-a/at-1',
        [
          ['a1', 'planner', null],
          ['a2', 'planner', 0.5],
        ],
      ],
      ['ro-b/at-1', [['b1', 'coder', 1]]],
      [
        `trace:${(23).toString(16).padStart(32, '0')}`,
        [
          ['t1', null, null],
          ['t2', null, 0.25],
        ],
      ],
      ['ro-c/at-1', [['c1', null, null]]],
      ['ro-f/at-1', [['e1', null, null]]],
      ['ro-g/at-1', [['g1', null, null]]],
    ]),
  );
  // The gateway's record of c1 is the one that counts, not the agent's own.
  assert.equal(byAttempt(scanned).get('ro-c/at-1')?.[0].metadata.span_id, arrivals[1][4].span_id);
});

test('options other than the defaults, spans not derived yet and GenAI log events are computed from the spans', async () => {
  assert.doesNotMatch(await tripletsQuery(source, { credit: 'final' }), /c.in_triplets/);
  await assert.rejects(tripletsQuery(source, { gamma: 3 }), /gamma must be from 0 to 1/);

  await store.writeSpans(spanRows(call('d1', 'D1', 1, { rollout_id: 'ro-d', trace: 25 })), 0);
  assert.doesNotMatch(await tripletsQuery(source), /c.in_triplets/);
  const fresh = await traceToTriplets(source);
  assert.deepEqual(fresh.filter((t) => t.metadata.rollout_id === 'ro-d').length, 1);
  await store.deriveAll();
  assert.match(await tripletsQuery(source), /c.in_triplets/);
  assert.deepEqual(byAttempt(await traceToTriplets(source)), byAttempt(fresh));

  // A GenAI event of the official OpenAI instrumentation: the llm_calls view reads those from logs.
  const event: Record<string, string> = {
    trace_id: (25).toString(16).padStart(32, '0'),
    span_id: 'feedfacefeedface',
    event_name: 'gen_ai.choice',
    body: '{"index":0}',
    attributes: '{}',
    resource: '{}',
  };
  const logs = newLogRows();
  for (const [name, index] of Object.entries(LOG)) logs.columns[index].push(event[name] ?? null);
  logs.length = 1;
  await store.writeLogs(finishRows(logs), 0);
  assert.doesNotMatch(await tripletsQuery(source), /c.in_triplets/);
});
