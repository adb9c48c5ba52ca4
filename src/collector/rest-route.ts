import type { IncomingMessage } from 'node:http';
import type * as z from 'zod';
import { ConflictError, InvalidQueryError, NotFoundError } from '../api/errors.js';
import { clip } from '../api/schema-fields.js';
import { HttpError, readJsonObject, sendJson, type Route } from './http.js';
import { checkNesting, parseRequest } from './validate.js';

const BODY_LIMIT = 16 * 1024 * 1024;

/** What a route answers, from its checked input and the {params} of its path; nothing is `null`. */
type Answer<S extends z.ZodType> = (input: z.output<S>, params: string[]) => Promise<unknown>;

/**
 * A LightningStore REST route under /v1/agl: its input, the JSON body of a POST or the query
 * parameters of a GET, is checked by `schema` (a 400 naming the field); it answers JSON with
 * `status`, and the store's errors as 404 (an unknown id), 409 (a change to something past taking
 * it) or 400 (a query it cannot do).
 */
function restRoute<S extends z.ZodType>(
  method: 'GET' | 'POST',
  path: string,
  status: number,
  schema: S,
  answer: Answer<S>,
): Route {
  return {
    method,
    path: `/v1/agl${path}`,
    handle: async (request, response, params) => {
      const input = parseRequest(schema, method === 'POST' ? await readOptionalJson(request) : queryObject(request));
      try {
        sendJson(response, status, (await answer(input, params)) ?? null);
      } catch (error) {
        if (error instanceof NotFoundError) throw new HttpError(404, clip(error.message, 300));
        if (error instanceof ConflictError) throw new HttpError(409, clip(error.message, 300));
        if (error instanceof InvalidQueryError) throw new HttpError(400, clip(error.message, 300));
        throw error;
      }
    },
  };
}

/** A GET that answers 200. */
export const get = <S extends z.ZodType>(path: string, query: S, answer: Answer<S>) =>
  restRoute('GET', path, 200, query, answer);
/** A POST that answers 200: a change, a search, a long poll. */
export const post = <S extends z.ZodType>(path: string, body: S, answer: Answer<S>) =>
  restRoute('POST', path, 200, body, answer);
/** A POST that creates something: 201. */
export const create = <S extends z.ZodType>(path: string, body: S, answer: Answer<S>) =>
  restRoute('POST', path, 201, body, answer);

/** A JSON object body that may be missing or null, nested at most MAX_NESTING_DEPTH deep. */
async function readOptionalJson(request: IncomingMessage): Promise<Record<string, unknown>> {
  const value = await readJsonObject(request, BODY_LIMIT, { orEmpty: true });
  checkNesting(value);
  return value;
}

/** Query parameters; repeated ones (status_in=a&status_in=b) become lists. */
export function queryObject(request: IncomingMessage): Record<string, unknown> {
  const params = new URL(request.url ?? '/', 'http://agl').searchParams;
  const query: Record<string, unknown> = {};
  for (const key of new Set(params.keys())) {
    const all = params.getAll(key);
    query[key] = key.endsWith('_in') ? all : all[0];
  }
  return query;
}
