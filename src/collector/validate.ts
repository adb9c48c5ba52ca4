import {
  ATTEMPT_STATUSES,
  ROLLOUT_MODES,
  type NamedResources,
  type Pagination,
  type RolloutConfig,
  type RolloutRequest,
  type Span,
  type SpanContext,
  type SpanQuery,
} from '../api/types.js';
import { MAX_NESTING_DEPTH, tooDeepAt } from '../otlp/nesting.js';
import { HttpError } from './http.js';

/**
 * Checks of REST bodies and query parameters. Each failure is a 400 whose message names the
 * field, as Agent Lightning's clients expect from a bad request.
 */
type Obj = Record<string, unknown>;

/** `text` cut to `max` characters: messages quote what clients sent, which may be megabytes. */
export const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}...` : text);

const bad = (field: string, expected: string, value: unknown) =>
  new HttpError(400, `${clip(field, 120)} must be ${expected}, not ${clip(JSON.stringify(value) ?? 'undefined', 80)}`);

/** `label` names the field in messages when it is not `field` itself (a nested one). */
export function optionalString(body: Obj, field: string, label = field): string | null | undefined {
  const value = body[field];
  if (value === undefined || value === null) return value;
  if (typeof value !== 'string') throw bad(label, 'a string', value);
  return value;
}

export function optionalObject(body: Obj, field: string, label = field): Obj | null | undefined {
  const value = body[field];
  if (value === undefined || value === null) return value;
  if (typeof value !== 'object' || Array.isArray(value)) throw bad(label, 'an object', value);
  return value as Obj;
}

/** A number, or its decimal string; an integer must be a safe one (JSON's 1e300 is not). */
export function optionalNumber(body: Obj, field: string, { integer = false, min = -Infinity, max = Infinity, label = field } = {}): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  const n = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || (integer && !Number.isSafeInteger(n)) || n < min || n > max) {
    const range = [min > -Infinity ? `at least ${min}` : '', max < Infinity ? `at most ${max}` : ''].filter(Boolean).join(' and ');
    throw bad(label, `${integer ? 'an integer' : 'a number'}${range ? ` of ${range}` : ''}`, value);
  }
  return n;
}

export function oneOf<T extends string>(field: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !allowed.includes(value as T)) throw bad(field, `one of ${allowed.join(', ')}`, value);
  return value as T;
}

export function listOf<T extends string>(field: string, value: unknown, allowed?: readonly T[]): T[] | undefined {
  if (value === undefined || value === null) return undefined;
  const list = Array.isArray(value) ? value : [value];
  return list.map((item, i) => {
    if (allowed) return oneOf(`${field}[${i}]`, item, allowed);
    if (typeof item !== 'string') throw bad(`${field}[${i}]`, 'a string', item);
    return item as T;
  });
}

/**
 * Refuses a body that nests deeper than MAX_NESTING_DEPTH (counted from the body itself), naming
 * where: every JSON field of it (rollout input, metadata, span attributes ...) is stored and
 * read back by readers that must not meet deeper values (nesting.ts).
 */
export function checkNesting(body: unknown): void {
  const path = tooDeepAt(body);
  if (path === null) return;
  throw new HttpError(400, `the body nests deeper than ${MAX_NESTING_DEPTH} levels at ${clip(path.replace(/^\./, ''), 120)}`);
}

/** A field that may be absent (unchanged) but not null (Agent Lightning's update rule for status and config). */
export function notNull(body: Obj, field: string): void {
  if (field in body && body[field] === null) throw new HttpError(400, `${field} is invalid; it cannot be a null value`);
}

export function rolloutConfig(value: unknown, field = 'config'): Partial<RolloutConfig> | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw bad(field, 'an object', value);
  const c = value as Obj;
  const nullableSeconds = (name: string) => (c[name] === null ? null : optionalNumber(c, name, { min: 0 }));
  return {
    timeout_seconds: nullableSeconds('timeout_seconds') ?? null,
    unresponsive_seconds: nullableSeconds('unresponsive_seconds') ?? null,
    max_attempts: optionalNumber(c, 'max_attempts', { integer: true, min: 1 }) ?? 1,
    retry_condition: listOf(`${field}.retry_condition`, c.retry_condition, ATTEMPT_STATUSES) ?? [],
  };
}

export function rolloutRequest(value: unknown, field: string): RolloutRequest {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw bad(field, 'an object', value);
  const r = value as Obj;
  if (!('input' in r)) throw new HttpError(400, `${field}.input is required`);
  return {
    input: r.input,
    mode: r.mode === undefined || r.mode === null ? null : oneOf(`${field}.mode`, r.mode, ROLLOUT_MODES),
    resources_id: optionalString(r, 'resources_id') ?? null,
    config: rolloutConfig(r.config, `${field}.config`),
    metadata: optionalObject(r, 'metadata') ?? null,
  };
}

const RESOURCE_FIELDS: Record<string, string[]> = {
  llm: ['endpoint', 'model'],
  proxy_llm: ['endpoint', 'model'],
  prompt_template: ['template', 'engine'],
};

/** A NamedResources object: every resource has a known resource_type and its required fields. */
export function namedResources(value: unknown): NamedResources {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw bad('the body', 'an object of named resources', value);
  const out: Record<string, unknown> = {};
  for (const [name, resource] of Object.entries(value as Obj)) {
    if (resource === null || typeof resource !== 'object' || Array.isArray(resource)) throw bad(name, 'a resource object', resource);
    const r = resource as Obj;
    const type = oneOf(`${name}.resource_type`, r.resource_type, Object.keys(RESOURCE_FIELDS));
    for (const required of RESOURCE_FIELDS[type]) if (typeof r[required] !== 'string') throw bad(`${name}.${required}`, 'a string', r[required]);
    if (type === 'prompt_template') oneOf(`${name}.engine`, r.engine, ['jinja', 'f-string', 'poml']);
    else {
      optionalString(r, 'api_key', `${name}.api_key`);
      optionalObject(r, 'sampling_parameters', `${name}.sampling_parameters`);
    }
    out[name] = type === 'prompt_template' ? r : { api_key: null, sampling_parameters: {}, ...r };
  }
  return out as NamedResources;
}

export function pagination(q: Obj): Pagination {
  return {
    limit: optionalNumber(q, 'limit', { integer: true }),
    offset: optionalNumber(q, 'offset', { integer: true }),
    sort_by: optionalString(q, 'sort_by') ?? null,
    sort_order: q.sort_order === undefined || q.sort_order === null ? undefined : oneOf('sort_order', q.sort_order, ['asc', 'desc'] as const),
  };
}

export function filterLogic(q: Obj): 'and' | 'or' | undefined {
  return q.filter_logic === undefined || q.filter_logic === null ? undefined : oneOf('filter_logic', q.filter_logic, ['and', 'or'] as const);
}

const HEX_32 = /^[0-9a-f]{32}$/;
const HEX_16 = /^[0-9a-f]{16}$/;

/** A Span body of POST /v1/agl/spans (Agent Lightning's Span model). */
export function spanBody(b: Obj): Span {
  const text = (field: string, pattern?: RegExp) => {
    const value = b[field];
    if (typeof value !== 'string' || (pattern && !pattern.test(value))) throw bad(field, pattern ? `lowercase hex of ${pattern === HEX_32 ? 32 : 16} digits` : 'a string', value);
    return value;
  };
  const parentId = b.parent_id === null || b.parent_id === undefined ? null : text('parent_id', HEX_16);
  const status = optionalObject(b, 'status') ?? {};
  const list = <T>(field: string, item: (value: unknown, field: string) => T): T[] => {
    const value = b[field] ?? [];
    if (!Array.isArray(value)) throw bad(field, 'a list', value);
    return value.map((v, i) => item(v, `${field}[${i}]`));
  };
  const resource = optionalObject(b, 'resource') ?? {};
  return {
    rollout_id: text('rollout_id'),
    attempt_id: text('attempt_id'),
    // Any integer, as Agent Lightning's Span model takes (its counter keeps the highest).
    sequence_id: optionalNumber(b, 'sequence_id', { integer: true }) as number,
    trace_id: text('trace_id', HEX_32),
    span_id: text('span_id', HEX_16),
    parent_id: parentId,
    name: text('name'),
    status: {
      status_code: status.status_code === undefined ? 'UNSET' : oneOf('status.status_code', status.status_code, ['UNSET', 'OK', 'ERROR'] as const),
      description: typeof status.description === 'string' ? status.description : null,
    },
    attributes: optionalObject(b, 'attributes') ?? {},
    events: list('events', spanEvent),
    links: list('links', spanLink),
    start_time: spanTime(b, 'start_time'),
    end_time: spanTime(b, 'end_time'),
    context: (optionalObject(b, 'context') as Span['context']) ?? null,
    parent: (optionalObject(b, 'parent') as Span['parent']) ?? null,
    resource: { attributes: (optionalObject(resource, 'attributes') as Obj) ?? {}, schema_url: typeof resource.schema_url === 'string' ? resource.schema_url : '' },
  };
}

/** The latest time a span may have: TIMESTAMP_NS (int64 nanoseconds) ends in 2262. */
const MAX_SPAN_SECONDS = 9_223_372_036;

/** A span's time in float seconds since the epoch, or null; `label` as for optionalString. */
function spanTime(body: Obj, field: string, label = field): number | null {
  return body[field] === null || body[field] === undefined ? null : optionalNumber(body, field, { min: 0, max: MAX_SPAN_SECONDS, label })!;
}

function spanEvent(value: unknown, field: string): Span['events'][number] {
  const event = objectAt(value, field);
  if (typeof event.name !== 'string') throw bad(`${field}.name`, 'a string', event.name);
  return {
    name: event.name,
    attributes: optionalObject(event, 'attributes', `${field}.attributes`) ?? {},
    timestamp: spanTime(event, 'timestamp', `${field}.timestamp`),
  };
}

function spanLink(value: unknown, field: string): Span['links'][number] {
  const link = objectAt(value, field);
  const context = objectAt(link.context, `${field}.context`);
  for (const id of ['trace_id', 'span_id']) if (typeof context[id] !== 'string') throw bad(`${field}.context.${id}`, 'a string', context[id]);
  return { context: context as unknown as SpanContext, attributes: optionalObject(link, 'attributes', `${field}.attributes`) ?? null };
}

function objectAt(value: unknown, field: string): Obj {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw bad(field, 'an object', value);
  return value as Obj;
}

export function spanQuery(q: Obj): SpanQuery {
  const rolloutId = optionalString(q, 'rollout_id');
  if (!rolloutId) throw new HttpError(400, 'rollout_id is required');
  const filters = ['trace_id', 'trace_id_contains', 'span_id', 'span_id_contains', 'parent_id', 'parent_id_contains', 'name', 'name_contains'] as const;
  const query: SpanQuery = { ...pagination(q), rollout_id: rolloutId, attempt_id: optionalString(q, 'attempt_id') ?? null, filter_logic: filterLogic(q) };
  for (const f of filters) {
    const value = optionalString(q, f);
    if (value !== null && value !== undefined) query[f] = value;
  }
  return query;
}
