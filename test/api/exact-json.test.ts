import assert from 'node:assert/strict';
import { test } from 'node:test';
import { integerText, parseJsonExact } from '../../src/api/exact-json.js';

// OTLP/JSON and query results carry 64-bit integers: a number literal beyond 2^53 must come
// back digit for digit, wherever it stands; long digit runs inside strings are plain text.

test('integers beyond 2^53 stay exact in every value position; long digits in strings stay strings', () => {
  const parsed = parseJsonExact(
    '{"a": 9007199254740993, "b": [1, -9223372036854775807], "c": {"d":12345678901234567890}}',
  ) as { a: unknown; b: unknown[]; c: { d: unknown } };
  assert.equal(integerText(parsed.a), '9007199254740993');
  assert.equal(integerText(parsed.b[1]), '-9223372036854775807');
  assert.equal(integerText(parsed.c.d), '12345678901234567890');
  assert.equal(parsed.b[0], 1);
  assert.equal(integerText((parseJsonExact('[\n  9007199254740993]') as unknown[])[0]), '9007199254740993');
  assert.equal(integerText(parseJsonExact('9007199254740993')), '9007199254740993');
  const times = parseJsonExact('{"startTimeUnixNano": "1732900000000000000", "n": 3}');
  assert.deepEqual(times, { startTimeUnixNano: '1732900000000000000', n: 3 });
  assert.equal(JSON.stringify(parseJsonExact('{"x":9007199254740993}')), '{"x":9007199254740993}');
});

test('a value nested thousands deep beside a long integer is read whole, not a stack overflow', () => {
  // The reviver that keeps integers exact walks the value recursively; a row that `agl query
  // --url` or `agl export --url` streams may hold what an agent sent nested this deep.
  const depth = 20_000;
  const text = `{"n": 9007199254740993, "deep": ${'['.repeat(depth)}1${']'.repeat(depth)}}`;
  const parsed = parseJsonExact(text) as { n: number; deep: unknown };
  let level = parsed.deep;
  for (let i = 0; i < depth; i++) level = (level as unknown[])[0];
  assert.equal(level, 1);
  assert.equal(typeof parsed.n, 'number');
});
