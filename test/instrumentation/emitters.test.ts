import assert from 'node:assert/strict';
import { before, beforeEach, test } from 'node:test';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import {
  emitAnnotation,
  emitException,
  emitMessage,
  emitObject,
  emitReward,
  findFinalReward,
  findRewardSpans,
  getRewardValue,
  operation,
  withRollout,
} from '../../src/index.js';
import { RolloutSpanProcessor } from '../../src/instrumentation/rollout-context.js';

// The emitters write Agent Lightning's span names and attribute encoding; checked on the spans
// the real SDK records.

const exporter = new InMemorySpanExporter();
before(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(
    new TracerProvider({ spanProcessors: [new RolloutSpanProcessor(), new SimpleSpanProcessor({ exporter })] }),
  );
});
beforeEach(() => exporter.reset());
const spans = () => exporter.getFinishedSpans();

test('emitReward: one number is the primary reward', () => {
  emitReward(0.5);
  const [span] = spans();
  assert.equal(span.name, 'agentlightning.annotation');
  assert.deepEqual(span.attributes, {
    'agentlightning.reward.0.name': 'primary',
    'agentlightning.reward.0.value': 0.5,
  });
});

test('emitReward: named rewards put the primary first, extra attributes kept', () => {
  emitReward({ speed: 0.2, accuracy: 1 }, { primaryKey: 'accuracy', attributes: { tag: ['fast'] } });
  assert.deepEqual(spans()[0].attributes, {
    'agentlightning.reward.0.name': 'accuracy',
    'agentlightning.reward.0.value': 1,
    'agentlightning.reward.1.name': 'speed',
    'agentlightning.reward.1.value': 0.2,
    tag: ['fast'],
  });
});

test('emitReward refuses what is not a reward, with a message naming the problem', () => {
  assert.throws(() => emitReward('1' as never), /emitReward needs a number or an object of named numbers, got string/);
  assert.throws(() => emitReward(Number.NaN), /finite number, got NaN/);
  assert.throws(() => emitReward({ a: 1 }), /named rewards need options.primaryKey/);
  assert.throws(() => emitReward({ a: 1 }, { primaryKey: 'b' }), /primaryKey "b" is not one of the rewards \(a\)/);
  assert.throws(
    () => emitReward({ a: true } as never, { primaryKey: 'a' }),
    /the reward "a" must be a finite number, got boolean/,
  );
  assert.equal(spans().length, 0);
});

test('emitAnnotation flattens nested values; nulls are refused', () => {
  emitAnnotation({ meta: { split: 'train', ids: [1, 2] }, list: [{ a: 1 }] });
  assert.deepEqual(spans()[0].attributes, { 'meta.split': 'train', 'meta.ids': [1, 2], 'list.0.a': 1 });
  assert.throws(() => emitAnnotation({ a: null }), /the value of "a" is null or undefined/);
});

test('emitMessage, emitObject and emitException', () => {
  emitMessage('hello', { level: 'info' });
  emitObject({ a: [1] });
  emitObject(3);
  emitObject(true);
  emitException(new RangeError('too far'));
  const [message, object, int, bool, exception] = spans();
  assert.deepEqual(
    [message.name, message.attributes],
    ['agentlightning.message', { 'agentlightning.message.body': 'hello', level: 'info' }],
  );
  assert.deepEqual(object.attributes, {
    'agentlightning.object.type': 'dict',
    'agentlightning.object.json': '{"a":[1]}',
  });
  assert.deepEqual(int.attributes, { 'agentlightning.object.type': 'int', 'agentlightning.object.literal': '3' });
  assert.deepEqual(bool.attributes, { 'agentlightning.object.type': 'bool', 'agentlightning.object.literal': 'True' });
  assert.equal(exception.name, 'agentlightning.exception');
  assert.equal(exception.attributes['exception.type'], 'RangeError');
  assert.equal(exception.attributes['exception.message'], 'too far');
  assert.throws(() => emitMessage(1 as never), /emitMessage needs a string, got number/);
  assert.throws(() => emitException('x' as never), /emitException needs an Error/);
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assert.throws(() => emitObject(cyclic), /must be JSON serializable/);
});

test('operation records input, output and nesting; a failure is recorded and rethrown', async () => {
  const plan = operation('plan', async (goal: string, steps: number) => {
    emitMessage('inside');
    return { goal, steps };
  });
  assert.deepEqual(await plan('win', 2), { goal: 'win', steps: 2 });
  const [inside, op] = spans();
  assert.equal(op.name, 'agentlightning.operation');
  assert.deepEqual(op.attributes, {
    'agentlightning.operation.name': 'plan',
    'agentlightning.operation.input.args.0': 'win',
    'agentlightning.operation.input.args.1': 2,
    'agentlightning.operation.output.goal': 'win',
    'agentlightning.operation.output.steps': 2,
  });
  assert.equal(inside.parentSpanContext?.spanId, op.spanContext().spanId);

  const fail = operation('fail', () => {
    throw new Error('no');
  });
  assert.throws(() => fail(), /no/);
  assert.equal(spans().at(-1)?.status.message, 'no');
});

test('withRollout attributes spans across awaits, concurrent scopes kept apart', async () => {
  await Promise.all(
    ['a', 'b'].map((id) =>
      withRollout({ rollout_id: `ro-${id}`, attempt_id: `at-${id}` }, async () => {
        await new Promise((resolve) => setTimeout(resolve, id === 'a' ? 5 : 0));
        emitMessage(id);
      }),
    ),
  );
  for (const span of spans()) {
    const id = span.attributes['agentlightning.message.body'];
    assert.equal(span.attributes['agentlightning.rollout_id'], `ro-${id}`);
    assert.equal(span.attributes['agentlightning.attempt_id'], `at-${id}`);
  }
  assert.throws(() => withRollout({} as never, () => 1), /withRollout needs \{rollout_id/);
});

test('reading rewards back: findFinalReward, findRewardSpans, getRewardValue (also the v0.2 form)', () => {
  emitMessage('before');
  emitReward(0.2);
  emitReward({ speed: 0.1, accuracy: 0.9 }, { primaryKey: 'accuracy' });
  const recorded = spans().map((s) => ({ name: s.name, attributes: s.attributes as Record<string, unknown> }));
  assert.deepEqual(findRewardSpans(recorded).map(getRewardValue), [0.2, 0.9]);
  assert.equal(findFinalReward(recorded), 0.9);
  assert.equal(findFinalReward([{ name: 'agentlightning.reward', attributes: { reward: 0.4 } }]), 0.4);
  assert.equal(findFinalReward(recorded.slice(0, 1)), null);
});
