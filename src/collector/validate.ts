import type * as z from 'zod';
import { clip, problemOf } from '../api/schema-fields.js';
import { MAX_NESTING_DEPTH, tooDeepAt } from '../otlp/nesting.js';
import { HttpError } from './http.js';

/**
 * Checks of REST bodies and query parameters against their schemas (api/requests.ts). Each
 * failure is a 400 whose message names the field, as Agent Lightning's clients expect from a
 * bad request.
 */

/** `value` as `schema` makes it, or a 400 (or `status`) that names the first field found wrong. */
export function parseRequest<S extends z.ZodType>(schema: S, value: unknown, status = 400): z.output<S> {
  const result = schema.safeParse(value, { error: problemOf });
  if (!result.success) throw new HttpError(status, issueMessage(result.error));
  return result.data;
}

/** The first issue as a sentence: its field's path, then its problem ("rollouts[0].mode must be one of train, val, test, not "x""). */
function issueMessage(error: z.ZodError): string {
  const [issue] = error.issues;
  return `${clip(fieldPath(issue.path), 120)} ${issue.message}`;
}

/** A path as JavaScript writes it: rollouts[0].config.max_attempts; the body itself when empty. */
function fieldPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return 'the body';
  return path
    .map((key, i) => (typeof key === 'number' ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`))
    .join('');
}

/**
 * Refuses a body that nests deeper than MAX_NESTING_DEPTH (counted from the body itself), naming
 * where: every JSON field of it (rollout input, metadata, span attributes ...) is stored and
 * read back by readers that must not meet deeper values (nesting.ts).
 */
export function checkNesting(body: unknown): void {
  const path = tooDeepAt(body);
  if (path === null) return;
  throw new HttpError(
    400,
    `the body nests deeper than ${MAX_NESTING_DEPTH} levels at ${clip(path.replace(/^\./, ''), 120)}`,
  );
}
