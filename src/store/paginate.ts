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
    const keyed = items.map((item) => ({
      item,
      key: ((item as Record<string, unknown>)[sortBy] ?? lastIfMissing) as number | string,
    }));
    keyed.sort((a, b) => (a.key < b.key ? -direction : a.key > b.key ? direction : 0));
    sorted = keyed.map((k) => k.item);
  }
  const page = limit === -1 ? sorted.slice(offset) : sorted.slice(offset, offset + limit);
  return { items: page, limit, offset, total: items.length };
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
