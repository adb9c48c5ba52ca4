/**
 * The dashboard's only way to its data: agl's REST API and SQL endpoint, with the token the user
 * gave (kept in sessionStorage: for this tab only, gone when it closes, never in a URL or a cookie).
 */
import type { QueryResult } from '../../src/api/query.js';
import type { AttemptedRollout, Attempt, PaginatedResult, Rollout, Span, Worker } from '../../src/api/types.js';

const TOKEN_KEY = 'agl.token';

export const storedToken = (): string | null => sessionStorage.getItem(TOKEN_KEY);
export function storeToken(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer other than 2xx, with the server's `detail`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Called when the server asks for a token (401): the app shows its login form. */
let onUnauthorized: () => void = () => {};
export const whenUnauthorized = (callback: () => void) => {
  onUnauthorized = callback;
};

async function request(method: 'GET' | 'POST', path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = {};
  const token = storedToken();
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (response.ok) return response;
  if (response.status === 401) onUnauthorized();
  let detail = `${response.status} ${response.statusText}`;
  try {
    detail = ((await response.json()) as { detail?: string }).detail ?? detail;
  } catch {
    // not JSON: the status line says enough
  }
  throw new ApiError(response.status, detail);
}

export async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  return (await (await request('GET', path, undefined, signal)).json()) as T;
}

/** One read-only SQL query (POST /v1/agl/query), rows as JSON objects. */
export async function sql<Row = Record<string, unknown>>(
  text: string,
  signal?: AbortSignal,
): Promise<QueryResult<Row>> {
  return (await (await request('POST', '/v1/agl/query', { sql: text }, signal)).json()) as QueryResult<Row>;
}

/** A query's whole result as a file (no row limit), and how many rows it holds. */
export async function sqlFile(text: string, format: 'csv' | 'parquet'): Promise<{ blob: Blob; rows: number }> {
  const response = await request('POST', '/v1/agl/query', { sql: text, format });
  return { blob: await response.blob(), rows: Number(response.headers.get('x-agl-rows') ?? 0) };
}

const encode = encodeURIComponent;

export const getRollout = (id: string, signal?: AbortSignal) =>
  getJson<AttemptedRollout | Rollout | null>(`/v1/agl/rollouts/${encode(id)}`, signal);
export const getAttempts = (id: string, signal?: AbortSignal) =>
  getJson<PaginatedResult<Attempt>>(`/v1/agl/rollouts/${encode(id)}/attempts?sort_by=sequence_id`, signal);
/** At most `limit` spans of an attempt, in start order. */
export const getSpans = (rolloutId: string, attemptId: string, limit: number, signal?: AbortSignal) =>
  getJson<PaginatedResult<Span>>(
    `/v1/agl/spans?rollout_id=${encode(rolloutId)}&attempt_id=${encode(attemptId)}&limit=${limit}&sort_by=start_time`,
    signal,
  );
export const getWorkers = (signal?: AbortSignal) =>
  getJson<PaginatedResult<Worker>>('/v1/agl/workers?limit=1000&sort_by=worker_id', signal);
