import assert from 'node:assert/strict';
import { test } from 'node:test';
import { paginate } from '../../src/store/paginate.js';

test('a page near the start, sorted partially, is the page of the full stable sort, ties and missing keys included', () => {
  // Few distinct keys (many ties) and some missing: the cases where a partial sort could differ.
  const items = Array.from({ length: 5000 }, (_, i) => ({
    id: i,
    start_time: i % 7 === 0 ? undefined : (i * 7919) % 97,
    status: ['b', 'a', 'c'][(i * 31) % 3],
  }));
  for (const sort_by of ['start_time', 'status', 'id'])
    for (const sort_order of ['asc', 'desc'] as const) {
      const full = paginate(items, { sort_by, sort_order }, ['id', 'start_time', 'status']).items;
      for (const [offset, limit] of [
        [0, 1],
        [0, 50],
        [150, 50],
        [600, 20],
      ]) {
        const page = paginate(items, { sort_by, sort_order, offset, limit }, ['id', 'start_time', 'status']);
        assert.deepEqual(
          page.items.map((x) => x.id),
          full.slice(offset, offset + limit).map((x) => x.id),
          `${sort_by} ${sort_order} ${offset}+${limit}`,
        );
        assert.equal(page.total, items.length);
      }
    }
});
