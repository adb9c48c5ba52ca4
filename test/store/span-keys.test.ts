import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SpanKeyIndex } from '../../src/store/span-keys.js';

// The index that tells a re-delivered span from a new one: what it saw it knows, what it was
// told to forget it takes for new, through growth and deletions in the middle of probe runs.

test('the span index knows every span it saw, and forgets only what it is told to', () => {
  const index = new SpanKeyIndex();
  const key = (i: number): [string, string] => [
    (i * 7919).toString(16).padStart(32, '0'),
    i.toString(16).padStart(16, '0'),
  ];
  const N = 200_000; // past several doublings of the table
  for (let i = 0; i < N; i++) assert.equal(index.add(...key(i)), true);
  for (let i = 0; i < N; i += 1000) assert.equal(index.add(...key(i)), false, 'a span seen is a suspected duplicate');
  for (let i = 0; i < N; i += 3) index.remove(...key(i));
  index.remove(...key(N + 1)); // never added: nothing happens
  for (let i = 0; i < N; i++) assert.equal(index.add(...key(i)), i % 3 === 0, `span ${i}`);
  for (let i = 0; i < N; i++) assert.equal(index.add(...key(i)), false);
});

test('the span index remembers a span for one generation at least and two at most, by time or by count', () => {
  let now = 0;
  const index = new SpanKeyIndex(60_000, 100_000, () => now);
  const key = (i: number): [string, string] => [
    i.toString(16).padStart(32, '0'),
    (i * 31).toString(16).padStart(16, '0'),
  ];
  const addAll = (from: number, to: number) => {
    for (let i = from; i < to; i++) assert.equal(index.add(...key(i)), true);
  };
  addAll(0, 1024); // the clock is read every 1,024 spans
  now = 60_000; // the first generation ends: it is kept as the previous one
  addAll(5000, 6024);
  assert.equal(index.add(...key(1)), false, 'remembered in the previous generation');
  now = 120_000; // and forgotten with it
  addAll(7000, 7001);
  assert.equal(index.add(...key(1)), true, 'two generations old: taken for new');
  assert.equal(index.add(...key(5000)), false);
  index.remove(...key(5000));
  assert.equal(index.add(...key(5000)), true, 'forgotten when told, in either generation');

  // A flood within one minute: never more than two generations of generationSize spans.
  const flooded = new SpanKeyIndex(60_000, 1_000, () => 0);
  for (let i = 0; i < 10_000; i++) flooded.add(...key(i));
  assert.ok(flooded.size <= 2_000, `${flooded.size} spans remembered`);
  assert.equal(flooded.add(...key(9_999)), false, 'the latest are remembered');
  assert.equal(flooded.add(...key(0)), true, 'the oldest are not');
});

test("an open reads OTLP's ids as texts of many spans, the same spans as one at a time", () => {
  const index = new SpanKeyIndex();
  const ids = (i: number): [string, string] => [
    (i * 104_729).toString(16).padStart(32, 'a'),
    (i * 31).toString(16).padStart(16, '0'),
  ];
  index.addOtlpIds(Array.from({ length: 5000 }, (_, i) => ids(i).join('')).join(''));
  assert.equal(index.size, 5000);
  for (let i = 0; i < 5000; i++) assert.equal(index.add(...ids(i)), false, `span ${i} is known`);
  assert.equal(index.add(...ids(5000)), true);
});
