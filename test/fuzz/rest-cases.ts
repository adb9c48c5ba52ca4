import fc from 'fast-check';
import { ATTEMPT_STATUSES, ROLLOUT_MODES, ROLLOUT_STATUSES, WORKER_STATUSES } from '../../src/api/types.js';
import { jsonBytes, RawBytes, RawJson, strBytes } from './otlp-model.js';
import type { FuzzRequest } from './server.js';

/**
 * Ids the server handed out (rollouts, attempts, workers, resources), so that a case can name
 * an existing one; a case picks by index, so that it does not depend on the ids' values.
 */
export class IdPool {
  private readonly ids: string[] = [];

  /** Remembers the ids in a JSON answer. */
  collect(text: string): void {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return;
    }
    const stack = [value];
    while (stack.length > 0) {
      const node = stack.pop();
      if (node === null || typeof node !== 'object') continue;
      for (const [key, child] of Object.entries(node)) {
        if (
          /^(rollout|attempt|worker|resources)_id$/.test(key) &&
          typeof child === 'string' &&
          !this.ids.includes(child)
        ) {
          this.ids.push(child);
          if (this.ids.length > 64) this.ids.shift();
        } else stack.push(child);
      }
    }
  }

  pick(index: number): string {
    return this.ids.length === 0 ? 'ro-none' : this.ids[index % this.ids.length];
  }
}

/** A path segment: an id the server made (by index), or any text. */
type IdChoice = { readonly known: number } | { readonly text: string };

export interface RestCase {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly ids: readonly IdChoice[];
  readonly query: Readonly<Record<string, string | string[]>>;
  readonly body: unknown;
  readonly rawBody?: Buffer;
}

const ODD_STRINGS = [
  '',
  '\ud800',
  'a\udc00',
  '\u0000',
  '\uffff',
  '\u{1F600}',
  ' ',
  'x'.repeat(70_000),
  '../../etc/passwd',
  '%',
  '?a=1',
  'null',
];
const oddString = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.constantFrom(...ODD_STRINGS),
  fc.string({ unit: 'binary', maxLength: 6 }),
);
const BAD_UTF8 = [[0x80], [0xc3], [0xed, 0xa0, 0x80], [0xff], [0xf4, 0x90, 0x80, 0x80]];

function deepObject(depth: number, shape: 'object' | 'array'): unknown {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i++) value = shape === 'array' ? [value] : { a: value };
  return value;
}

/** Any JSON value a field might get: random, odd text, invalid UTF-8, deep nesting, numbers past double. */
export const fieldValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 2, arbitrary: oddString },
  { weight: 1, arbitrary: fc.constantFrom(...BAD_UTF8).map((bytes) => new RawBytes(Uint8Array.from(bytes))) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('1e400', '-1e400', '123456789012345678901234567890', '-0').map((n) => new RawJson(n)),
  },
  {
    weight: 1,
    arbitrary: fc
      .record({
        depth: fc.oneof(fc.integer({ min: 60, max: 70 }), fc.constantFrom(2_000, 5_000)),
        shape: fc.constantFrom('object' as const, 'array' as const),
      })
      .map(({ depth, shape }) => deepObject(depth, shape)),
  },
);

/** Mostly a value of the kind the field wants, sometimes anything. */
export const near = <T>(valid: fc.Arbitrary<T>) =>
  fc.oneof({ weight: 3, arbitrary: valid }, { weight: 1, arbitrary: fieldValue });
const knownId = fc.nat().map((known) => ({ known }));
/** Ids in bodies: "@N" is replaced by the Nth known id when the request is made. */
const bodyId = near(fc.nat().map((n) => `@${n}`));
// Not null: a wait without a timeout is a long poll of up to 60 s, longer than a case may take.
const smallWait = fc.oneof(fc.constantFrom(0, 0.05, 0.1), fc.constantFrom(-1, 'soon', '0.1'));
const objectOf = (value: fc.Arbitrary<unknown>) =>
  fc.dictionary(fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom(...ODD_STRINGS.slice(0, 6))), value, {
    maxKeys: 3,
  });

const config = near(
  fc.record(
    {
      timeout_seconds: near(fc.constantFrom(null, 0, 30, 3600)),
      unresponsive_seconds: near(fc.constantFrom(null, 0, 60)),
      max_attempts: near(fc.integer({ min: 0, max: 4 })),
      retry_condition: near(fc.subarray([...ATTEMPT_STATUSES])),
    },
    { requiredKeys: [] },
  ),
);

const rolloutRequest = fc.record(
  {
    input: fieldValue,
    mode: near(fc.constantFrom(...ROLLOUT_MODES, null)),
    resources_id: near(bodyId),
    config,
    metadata: near(objectOf(fieldValue)),
  },
  { requiredKeys: ['input'] },
);

const pagination = {
  limit: near(fc.integer({ min: -2, max: 5 })),
  offset: near(fc.integer({ min: -1, max: 5 })),
  sort_by: near(fc.constantFrom('rollout_id', 'start_time', 'status', 'sequence_id', 'nope; DROP TABLE spans')),
  sort_order: near(fc.constantFrom('asc', 'desc')),
};
const filterLogic = near(fc.constantFrom('and', 'or'));

const hex = (digits: number) =>
  fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: digits, maxLength: digits });
const spanBody = fc.record(
  {
    rollout_id: bodyId,
    attempt_id: bodyId,
    sequence_id: near(fc.integer({ min: 0, max: 3 })),
    trace_id: near(hex(32)),
    span_id: near(hex(16)),
    parent_id: near(fc.option(hex(16))),
    name: near(fc.string({ maxLength: 8 })),
    status: near(
      fc.record(
        { status_code: near(fc.constantFrom('UNSET', 'OK', 'ERROR')), description: fieldValue },
        { requiredKeys: [] },
      ),
    ),
    attributes: near(objectOf(fieldValue)),
    events: near(fc.array(fieldValue, { maxLength: 2 })),
    links: near(fc.array(fieldValue, { maxLength: 2 })),
    start_time: near(fc.constantFrom(0, 1_700_000_000.5, null)),
    end_time: near(fc.constantFrom(0, 1_700_000_001, null)),
    resource: near(fc.record({ attributes: near(objectOf(fieldValue)), schema_url: fieldValue }, { requiredKeys: [] })),
  },
  { requiredKeys: ['rollout_id', 'attempt_id', 'trace_id', 'span_id', 'name'] },
);

const resource = fc.oneof(
  fc.record(
    {
      resource_type: near(fc.constantFrom('llm', 'proxy_llm')),
      endpoint: near(fc.constant('http://127.0.0.1:1/v1')),
      model: near(fc.string({ maxLength: 8 })),
      sampling_parameters: near(objectOf(fieldValue)),
    },
    { requiredKeys: ['resource_type'] },
  ),
  fc.record(
    {
      resource_type: fc.constant('prompt_template'),
      template: near(fc.string({ maxLength: 8 })),
      engine: near(fc.constantFrom('jinja', 'f-string', 'poml')),
    },
    { requiredKeys: [] },
  ),
);
const namedResources = near(fc.dictionary(fc.string({ maxLength: 6 }), near(resource), { maxKeys: 2 }));

interface RouteShape {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly body?: fc.Arbitrary<unknown>;
  readonly query?: readonly string[];
}

/** Every route of src/collector/store-routes.ts, with bodies close to what each takes. */
const ROUTES: readonly RouteShape[] = [
  {
    method: 'POST',
    path: '/queues/rollouts/enqueue',
    body: fc.record({ rollouts: near(fc.array(near(rolloutRequest), { maxLength: 3 })) }),
  },
  {
    method: 'POST',
    path: '/queues/rollouts/dequeue',
    body: fc.record(
      { limit: near(fc.integer({ min: -1, max: 3 })), worker_id: bodyId, wait_seconds: smallWait },
      { requiredKeys: [] },
    ),
  },
  {
    method: 'POST',
    path: '/rollouts',
    body: fc
      .tuple(rolloutRequest, fc.record({ worker_id: bodyId }, { requiredKeys: [] }))
      .map(([a, b]) => ({ ...a, ...b })),
  },
  {
    method: 'GET',
    path: '/rollouts',
    query: [
      'limit',
      'offset',
      'status_in',
      'rollout_id_in',
      'rollout_id_contains',
      'mode_in',
      'input_contains',
      'filter_logic',
      'sort_by',
      'sort_order',
    ],
  },
  {
    method: 'POST',
    path: '/rollouts/search',
    body: fc.record(
      {
        ...pagination,
        status_in: near(fc.subarray([...ROLLOUT_STATUSES])),
        rollout_id_in: near(fc.array(bodyId, { maxLength: 2 })),
        rollout_id_contains: near(oddString),
        mode_in: near(fc.subarray([...ROLLOUT_MODES])),
        input_contains: near(oddString),
        filter_logic: filterLogic,
      },
      { requiredKeys: [] },
    ),
  },
  { method: 'GET', path: '/rollouts/{}/attempts/latest' },
  { method: 'GET', path: '/rollouts/{}/attempts', query: ['limit', 'offset', 'sort_by', 'sort_order'] },
  { method: 'POST', path: '/rollouts/{}/attempts/search', body: fc.record(pagination, { requiredKeys: [] }) },
  { method: 'POST', path: '/rollouts/{}/attempts', body: fc.record({ worker_id: bodyId }, { requiredKeys: [] }) },
  {
    method: 'POST',
    path: '/rollouts/{}/attempts/{}',
    body: fc.record(
      {
        status: near(fc.constantFrom(...ATTEMPT_STATUSES)),
        worker_id: bodyId,
        last_heartbeat_time: near(fc.constantFrom(0, 1_700_000_000)),
        metadata: near(objectOf(fieldValue)),
      },
      { requiredKeys: [] },
    ),
  },
  { method: 'GET', path: '/rollouts/{}' },
  {
    method: 'POST',
    path: '/rollouts/{}',
    body: fc.record(
      {
        input: fieldValue,
        mode: near(fc.constantFrom(...ROLLOUT_MODES, null)),
        resources_id: bodyId,
        metadata: near(objectOf(fieldValue)),
        status: near(fc.constantFrom(...ROLLOUT_STATUSES)),
        config,
      },
      { requiredKeys: [] },
    ),
  },
  { method: 'GET', path: '/workers', query: ['limit', 'offset', 'status_in', 'worker_id_contains', 'filter_logic'] },
  {
    method: 'POST',
    path: '/workers/search',
    body: fc.record(
      {
        ...pagination,
        status_in: near(fc.subarray([...WORKER_STATUSES])),
        worker_id_contains: near(oddString),
        filter_logic: filterLogic,
      },
      { requiredKeys: [] },
    ),
  },
  { method: 'GET', path: '/workers/{}' },
  {
    method: 'POST',
    path: '/workers/{}',
    body: fc.record({ heartbeat_stats: near(objectOf(fieldValue)) }, { requiredKeys: [] }),
  },
  { method: 'GET', path: '/statistics' },
  { method: 'GET', path: '/resources', query: ['limit', 'offset', 'resources_id', 'resources_id_contains'] },
  { method: 'POST', path: '/resources', body: namedResources },
  { method: 'GET', path: '/resources/latest' },
  { method: 'GET', path: '/resources/{}' },
  { method: 'POST', path: '/resources/{}', body: namedResources },
  { method: 'POST', path: '/spans', body: spanBody },
  {
    method: 'GET',
    path: '/spans',
    query: ['rollout_id', 'attempt_id', 'limit', 'offset', 'trace_id', 'name_contains', 'filter_logic'],
  },
  {
    method: 'POST',
    path: '/spans/search',
    body: fc.record(
      {
        rollout_id: bodyId,
        attempt_id: bodyId,
        ...pagination,
        name_contains: near(oddString),
        filter_logic: filterLogic,
      },
      { requiredKeys: [] },
    ),
  },
  {
    method: 'POST',
    path: '/spans/next',
    body: fc.record({ rollout_id: bodyId, attempt_id: bodyId }, { requiredKeys: [] }),
  },
  {
    method: 'POST',
    path: '/waits/rollouts',
    body: fc.record(
      { rollout_ids: near(fc.array(bodyId, { maxLength: 3 })), timeout: smallWait },
      { requiredKeys: ['timeout'] },
    ),
  },
];

/** Bodies that are not a JSON object, or not JSON: broken text, deep text nesting, invalid UTF-8. */
const rawBody = fc
  .oneof(
    fc.constantFrom(
      '{"rollouts": [',
      '{"a":1}{"b":2}',
      '[]',
      '"x"',
      '1',
      'null',
      '{"input": "\\ud800"}',
      '{"input": "\\u0000"}',
      '\ufeff{}',
    ),
    fc.constantFrom(20_000, 200_000).map((n) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`),
    fc.constantFrom(200_000).map((n) => `{"input":${'['.repeat(n)}${']'.repeat(n)}}`),
    fc.string({ unit: 'binary', maxLength: 20 }),
  )
  .map((text) => Buffer.from(text, 'utf8'));
const rawBytesBody = fc
  .uint8Array({ maxLength: 32 })
  .map((bytes) => Buffer.concat([Buffer.from('{"input":"'), bytes, Buffer.from('"}')]));

/** A query parameter's text; `near` values may nest deeper than String() can recurse. */
const queryText = (value: unknown): string => {
  try {
    return String(value);
  } catch {
    return '[nested]';
  }
};
const queryValue = near(
  fc.oneof(
    fc.constantFrom(...ROLLOUT_STATUSES, 'and', 'or', 'asc', '-1', '2'),
    fc.nat().map((n) => `@${n}`),
  ),
).map(queryText);

function routeCase(route: RouteShape): fc.Arbitrary<RestCase> {
  const holes = route.path.split('{}').length - 1;
  const body =
    route.method === 'GET'
      ? fc.constant(undefined)
      : fc.oneof(
          { weight: 6, arbitrary: route.body ?? fc.constant({}) },
          { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 4 }) },
          { weight: 1, arbitrary: objectOf(fieldValue) },
        );
  const raw =
    route.method === 'GET'
      ? fc.constant(undefined)
      : fc.option(fc.oneof(rawBody, rawBytesBody), { freq: 8, nil: undefined });
  return fc.record(
    {
      method: fc.constant(route.method),
      path: fc.constant(route.path),
      ids: fc.array(
        fc.oneof({ weight: 3, arbitrary: knownId }, { weight: 1, arbitrary: oddString.map((text) => ({ text })) }),
        { minLength: holes, maxLength: holes },
      ),
      query: fc.dictionary(
        fc.constantFrom(...(route.query ?? ['limit'])),
        fc.oneof(queryValue, fc.array(queryValue, { maxLength: 2 })),
        { maxKeys: route.query ? 3 : 0 },
      ),
      body,
      rawBody: raw,
    },
    { requiredKeys: ['method', 'path', 'ids', 'query', 'body'] },
  );
}

export const restCases: fc.Arbitrary<RestCase> = fc.oneof(...ROUTES.map(routeCase));

/** The JSON text with "@N" strings replaced by known ids (on the text: bodies nest too deep to walk recursively). */
function withIds(body: Buffer, ids: IdPool): Buffer {
  const parts: Buffer[] = [];
  const pattern = /"@(\d+)"/g;
  const text = body.toString('latin1'); // one character per byte: match offsets are byte offsets
  let last = 0;
  for (let match = pattern.exec(text); match; match = pattern.exec(text)) {
    parts.push(body.subarray(last, match.index), Buffer.from(JSON.stringify(ids.pick(Number(match[1])))));
    last = match.index + match[0].length;
  }
  parts.push(body.subarray(last));
  return Buffer.concat(parts);
}

/** A path segment, percent-encoded byte by byte (lone surrogates as the invalid UTF-8 a careless client sends). */
function percentEncoded(text: string): string {
  return [...strBytes([text])]
    .map((byte) =>
      /[A-Za-z0-9\-._~]/.test(String.fromCharCode(byte))
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`,
    )
    .join('');
}

/** The HTTP request of a case, with known ids filled in. */
export function restRequest(testCase: RestCase, ids: IdPool): FuzzRequest {
  let hole = 0;
  const path = testCase.path.replace(/\{\}/g, () => {
    const choice = testCase.ids[hole++];
    return percentEncoded('known' in choice ? ids.pick(choice.known) : choice.text);
  });
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(testCase.query)) {
    for (const item of Array.isArray(value) ? value : [value])
      search.append(key, /^@\d+$/.test(item) ? ids.pick(Number(item.slice(1))) : item);
  }
  const query = search.size > 0 ? `?${search}` : '';
  const body = testCase.method === 'GET' ? undefined : (testCase.rawBody ?? withIds(jsonBytes(testCase.body), ids));
  return {
    method: testCase.method,
    path: `/v1/agl${path}${query}`,
    headers: testCase.method === 'GET' ? {} : { 'content-type': 'application/json' },
    body,
  };
}
