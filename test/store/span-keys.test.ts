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
