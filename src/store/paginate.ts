import { InvalidQueryError } from '../api/errors.js';
import type { PaginatedResult, Pagination } from '../api/types.js';

/**
 * Sorts and pages `items` as Agent Lightning's stores do: no sort_by keeps insertion order,
 * missing times sort last, limit -1 means all, total counts the matches before paging.
 */
export function paginate<T extends object>(
  items: T[],
  query: Pagination,
  sortable: readonly string[],
): PaginatedResult<T> {
  const limit = query.limit ?? -1;
  const offset = query.offset ?? 0;
  const sortOrder = query.sort_order ?? 'asc';
  if (!Number.isInteger(limit) || limit === 0 || limit < -1)
    throw new InvalidQueryError('limit must be greater than 0, or -1 for no limit');
  if (!Number.isInteger(offset) || offset < 0) throw new InvalidQueryError('offset must be an integer, 0 or more');
  if (sortOrder !== 'asc' && sortOrder !== 'desc')
    throw new InvalidQueryError(`sort_order must be "asc" or "desc", not ${JSON.stringify(sortOrder)}`);
  const sortBy = query.sort_by ?? null;
  let sorted = items;
  if (sortBy !== null) {
    if (!sortable.includes(sortBy))
      throw new InvalidQueryError(`sort_by must be one of ${sortable.join(', ')}, not ${JSON.stringify(sortBy)}`);
    const lastIfMissing = sortBy.endsWith('_time') ? Infinity : '';
    const direction = sortOrder === 'asc' ? 1 : -1;
    // Each key read once, not twice per comparison: sorting 100,000 rollouts took twice as long.
    const keyed = items.map((item, index) => ({
      item,
      index,
      key: ((item as Record<string, unknown>)[sortBy] ?? lastIfMissing) as number | string,
    }));
    // Ties keep insertion order, so that a partial sort gives the full sort's first items.
    const compare = (a: (typeof keyed)[number], b: (typeof keyed)[number]) =>
      a.key < b.key ? -direction : a.key > b.key ? direction : a.index - b.index;
    const wanted = limit === -1 ? keyed.length : offset + limit;
    // Descending, the newest first: items come in insertion order, mostly oldest first, so the
    // heap takes them from the end, where few of the rest are among the first (from the start,
    // every rollout of 100,000 would go into the heap).
    sorted = (wanted * 8 < keyed.length ? firstSorted(keyed, wanted, compare, direction < 0) : keyed.sort(compare)).map(
      (k) => k.item,
    );
  }
  const page = limit === -1 ? sorted.slice(offset) : sorted.slice(offset, offset + limit);
  return { items: page, limit, offset, total: items.length };
}

/**
 * The first `count` of `items` in `compare`'s order, with a heap of `count` items: a page near the
 * start of 100,000 rollouts costs n log(count) comparisons at most, not a sort of them all.
 */
function firstSorted<T>(items: readonly T[], count: number, compare: (a: T, b: T) => number, fromEnd: boolean): T[] {
  // A max-heap of the first `count` so far, its root the last of them; items move into a hole
  // rather than being swapped. The order they are fed in changes the work, not the result.
  const heap: T[] = [];
  for (let k = 0; k < items.length; k++) {
    const item = items[fromEnd ? items.length - 1 - k : k];
    if (heap.length < count) {
      let i = heap.length;
      heap.push(item);
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (compare(item, heap[parent]) <= 0) break;
        heap[i] = heap[parent];
        i = parent;
      }
      heap[i] = item;
    } else if (count > 0 && compare(item, heap[0]) < 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= heap.length) break;
        const child = left + 1 < heap.length && compare(heap[left + 1], heap[left]) > 0 ? left + 1 : left;
        if (compare(heap[child], item) <= 0) break;
        heap[i] = heap[child];
        i = child;
      }
      heap[i] = item;
    }
  }
  return heap.sort(compare);
}

/** Combines filter conditions with filter_logic; no condition matches everything. */
export function matches(conditions: boolean[], logic: 'and' | 'or' = 'and'): boolean {
  checkFilterLogic(logic);
  if (conditions.length === 0) return true;
  return logic === 'and' ? conditions.every(Boolean) : conditions.some(Boolean);
}

export function checkFilterLogic(logic: string | undefined): void {
  if (logic !== undefined && logic !== 'and' && logic !== 'or') {
    throw new InvalidQueryError(`filter_logic must be "and" or "or", not ${JSON.stringify(logic)}`);
  }
}
