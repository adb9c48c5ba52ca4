import { integerText, parseJsonExact } from '../api/exact-json.js';
import { MAX_NESTING_DEPTH, TooDeepError } from './nesting.js';
import { replaceLoneSurrogates } from './well-formed.js';
import {
  invalidLogIds,
  invalidSpanIds,
  newLogBatch,
  newSpanBatch,
  noAttribution,
  noteAttribution,
  pushLog,
  pushSpan,
  reject,
  timestampOrNull,
  type Attribution,
  type BatchBuilder,
  finishBatch,
  type DecodedBatch,
  type ResourceContext,
} from './batch.js';

/** A JSON body that is not an OTLP request; the message names the field at fault. */
export class OtlpJsonError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OtlpJsonError';
  }
}

type Obj = Record<string, unknown>;

/**
 * Decodes OTLP/JSON (the protobuf JSON mapping with OTLP's exceptions: hex ids, enums as
 * integers). Tolerated as well: base64 ids, 64-bit integers as numbers, enum names, and the
 * .proto's snake_case field names.
 */
export function decodeTracesJson(text: string): DecodedBatch {
  const batch = newSpanBatch();
  forEachItem(parseRequest(text, batch), batch, 'resourceSpans', 'scopeSpans', 'spans', (span, path, context) => {
    const traceId = id(span, path, 'traceId', 'trace_id');
    const spanId = id(span, path, 'spanId', 'span_id');
    const parentId = id(span, path, 'parentSpanId', 'parent_span_id') || null;
    const name = str(span, path, 'name') ?? '';
    const invalid = invalidSpanIds(traceId, spanId, parentId);
    if (invalid) {
      reject(batch, `span "${name}": ${invalid}`);
      return;
    }
    const attribution = noAttribution();
    const status = obj(span, path, 'status');
    rejectTooDeep(batch, `span "${name}"`, () =>
      pushSpan(
        batch.rows,
        {
          traceId,
          spanId,
          parentId,
          traceState: str(span, path, 'traceState', 'trace_state') || null,
          flags: int(span, path, 'flags'),
          name,
          kind: enumValue(span, path, ['kind'], SPAN_KIND_NAMES) ?? 0,
          startTime: time(span, path, 'startTimeUnixNano', 'start_time_unix_nano'),
          endTime: time(span, path, 'endTimeUnixNano', 'end_time_unix_nano'),
          attributesJson: attributesJson(span, path, attribution),
          eventsJson: listJson(span, path, 'events', (event, p) => {
            const dropped = int(event, p, 'droppedAttributesCount', 'dropped_attributes_count');
            return `{"time_unix_nano":"${time(event, p, 'timeUnixNano', 'time_unix_nano') ?? 0}","name":${JSON.stringify(str(event, p, 'name') ?? '')},"attributes":${attributesJson(event, p)}${dropped ? `,"dropped_attributes_count":${dropped}` : ''}}`;
          }),
          linksJson: listJson(span, path, 'links', (link, p) => {
            const flags = int(link, p, 'flags');
            return `{"trace_id":"${id(link, p, 'traceId', 'trace_id')}","span_id":"${id(link, p, 'spanId', 'span_id')}","trace_state":${JSON.stringify(str(link, p, 'traceState', 'trace_state') ?? '')},"attributes":${attributesJson(link, p)}${flags === null ? '' : `,"flags":${flags}`}}`;
          }),
          statusCode: status ? (enumValue(status, `${path}.status`, ['code'], STATUS_CODE_NAMES) ?? 0) : 0,
          statusMessage: status ? str(status, `${path}.status`, 'message') || null : null,
          attribution,
        },
        context,
      ),
    );
  });
  return finishBatch(batch);
}

export function decodeLogsJson(text: string): DecodedBatch {
  const batch = newLogBatch();
  forEachItem(parseRequest(text, batch), batch, 'resourceLogs', 'scopeLogs', 'logRecords', (record, path, context) => {
    const attribution = noAttribution();
    const body = record.body;
    rejectTooDeep(batch, 'log record', () => {
      const log = {
        time: time(record, path, 'timeUnixNano', 'time_unix_nano'),
        observedTime: time(record, path, 'observedTimeUnixNano', 'observed_time_unix_nano'),
        traceId: id(record, path, 'traceId', 'trace_id') || null,
        spanId: id(record, path, 'spanId', 'span_id') || null,
        severityNumber: enumValue(record, path, ['severityNumber', 'severity_number'], SEVERITY_NAMES),
        severityText: str(record, path, 'severityText', 'severity_text') || null,
        eventName: str(record, path, 'eventName', 'event_name') || null,
        bodyJson: body === undefined || body === null ? null : bodyJson(body, `${path}.body`),
        attributesJson: attributesJson(record, path, attribution),
        flags: int(record, path, 'flags'),
        attribution,
      };
      const invalid = invalidLogIds(log.traceId, log.spanId);
      if (invalid) reject(batch, invalid);
      else pushLog(batch.rows, log, context);
    });
  });
  return finishBatch(batch);
}

/** Runs `push`; a value in it nested too deep rejects the item instead of the request. */
function rejectTooDeep(batch: BatchBuilder, item: string, push: () => void): void {
  try {
    push();
  } catch (error) {
    if (!(error instanceof TooDeepError)) throw error;
    reject(batch, `${item}: ${error.message}`);
  }
}

function parseRequest(text: string, batch: BatchBuilder): Obj {
  let request: unknown;
  try {
    request = parseJsonExact(text);
  } catch (error) {
    const reason = error instanceof RangeError ? 'it is nested too deeply to read' : (error as Error).message;
    throw new OtlpJsonError(`the body is not JSON: ${reason}`);
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw new OtlpJsonError('the body must be a JSON object');
  }
  batch.replacedValues += replaceLoneSurrogates(text, request);
  return request as Obj;
}

function forEachItem(
  request: Obj,
  batch: BatchBuilder,
  groupsKey: string,
  scopesKey: string,
  itemsKey: string,
  visit: (item: Obj, path: string, context: ResourceContext) => void,
): void {
  list(request, '', groupsKey, snake(groupsKey)).forEach((group, g) => {
    const gPath = `${groupsKey}[${g}]`;
    const resource = obj(group, gPath, 'resource');
    const attribution = noAttribution();
    let resourceJson = '{}';
    let tooDeep: TooDeepError | null = null;
    try {
      if (resource) resourceJson = attributesJson(resource, `${gPath}.resource`, attribution);
    } catch (error) {
      if (!(error instanceof TooDeepError)) throw error;
      tooDeep = error;
    }
    const serviceName = resource ? serviceNameOf(resource) : null;
    list(group, gPath, scopesKey, snake(scopesKey)).forEach((scopeGroup, s) => {
      const sPath = `${gPath}.${scopesKey}[${s}]`;
      const scope = obj(scopeGroup, sPath, 'scope');
      const context: ResourceContext = {
        resourceJson,
        serviceName,
        attribution,
        scopeName: scope ? (str(scope, `${sPath}.scope`, 'name') ?? null) : null,
        scopeVersion: scope ? str(scope, `${sPath}.scope`, 'version') || null : null,
      };
      list(scopeGroup, sPath, itemsKey, snake(itemsKey)).forEach((item, i) => {
        // Every item shares the resource: with a resource nested too deep, none can be stored.
        if (tooDeep) reject(batch, `resource ${tooDeep.message}`);
        else visit(item, `${sPath}.${itemsKey}[${i}]`, context);
      });
    });
  });
}

const snake = (camel: string) => camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function field(o: Obj, names: string[]): unknown {
  for (const name of names) if (o[name] !== undefined && o[name] !== null) return o[name];
  return undefined;
}

function list(o: Obj, path: string, ...names: string[]): Obj[] {
  const value = field(o, names);
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new OtlpJsonError(`${at(path, names[0])}: expected an array`);
  value.forEach((item, i) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) {
      throw new OtlpJsonError(`${at(path, names[0])}[${i}]: expected an object`);
    }
  });
  return value as Obj[];
}

function obj(o: Obj, path: string, ...names: string[]): Obj | null {
  const value = field(o, names);
  if (value === undefined) return null;
  if (typeof value !== 'object' || Array.isArray(value))
    throw new OtlpJsonError(`${at(path, names[0])}: expected an object`);
  return value as Obj;
}

function str(o: Obj, path: string, ...names: string[]): string | undefined {
  const value = field(o, names);
  if (value === undefined) return undefined;
  if (typeof value !== 'string')
    throw new OtlpJsonError(`${at(path, names[0])}: expected a string, got ${describe(value)}`);
  return value;
}

function int(o: Obj, path: string, ...names: string[]): number | null {
  const value = field(o, names);
  if (value === undefined) return null;
  const text = integerText(value);
  if (text === null) throw new OtlpJsonError(`${at(path, names[0])}: expected an integer, got ${describe(value)}`);
  return Number(text) | 0;
}

function time(o: Obj, path: string, ...names: string[]): bigint | null {
  const value = field(o, names);
  if (value === undefined) return null;
  const text = integerText(value);
  if (text === null || text.startsWith('-')) {
    throw new OtlpJsonError(
      `${at(path, names[0])}: expected nanoseconds as an unsigned integer, got ${describe(value)}`,
    );
  }
  return timestampOrNull(BigInt(text));
}

const HEX_ID = /^[0-9a-fA-F]*$/;

/** A trace or span id as lowercase hex: hex per OTLP/JSON, base64 as some exporters send. */
function id(o: Obj, path: string, ...names: string[]): string {
  const value = str(o, path, ...names) ?? '';
  if ((value.length === 32 || value.length === 16) && HEX_ID.test(value)) return value.toLowerCase();
  if (value === '') return '';
  const bytes = Buffer.from(value, 'base64');
  if (
    (bytes.length === 16 || bytes.length === 8) &&
    bytes.toString('base64').replace(/=+$/, '') === value.replace(/=+$/, '')
  ) {
    return bytes.toString('hex');
  }
  throw new OtlpJsonError(`${at(path, names[0])}: "${value.slice(0, 40)}" is neither a hex nor a base64 id`);
}

const SPAN_KIND_NAMES = [
  'SPAN_KIND_UNSPECIFIED',
  'SPAN_KIND_INTERNAL',
  'SPAN_KIND_SERVER',
  'SPAN_KIND_CLIENT',
  'SPAN_KIND_PRODUCER',
  'SPAN_KIND_CONSUMER',
];
const STATUS_CODE_NAMES = ['STATUS_CODE_UNSET', 'STATUS_CODE_OK', 'STATUS_CODE_ERROR'];
const SEVERITY_NAMES = ['SEVERITY_NUMBER_UNSPECIFIED'].concat(
  ...['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL'].map((level) =>
    ['', '2', '3', '4'].map((n) => `SEVERITY_NUMBER_${level}${n}`),
  ),
);

function enumValue(o: Obj, path: string, names: string[], valueNames: string[]): number | null {
  const value = field(o, names);
  if (value === undefined) return null;
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  if (typeof value === 'string' && valueNames.includes(value)) return valueNames.indexOf(value);
  throw new OtlpJsonError(`${at(path, names[0])}: expected an enum number, got ${describe(value)}`);
}

function attributesJson(o: Obj, path: string, attribution?: Attribution): string {
  const parts = list(o, path, 'attributes').map((kv, i) =>
    keyValueJson(kv, `${at(path, 'attributes')}[${i}]`, attribution),
  );
  return `{${parts.join(',')}}`;
}

/** A KeyValue as `"key":value`; `depth` is the nesting level of its value (1 in an attribute list). */
function keyValueJson(kv: Obj, path: string, attribution?: Attribution, depth = 1): string {
  const key = str(kv, path, 'key') ?? '';
  const value = kv.value;
  if (attribution && key.startsWith('agentlightning.') && value && typeof value === 'object') {
    const v = value as Obj;
    const scalar = typeof v.stringValue === 'string' ? v.stringValue : integerText(v.intValue ?? v.int_value);
    noteAttribution(
      attribution,
      key,
      scalar === null ? null : typeof v.stringValue === 'string' ? scalar : Number(scalar),
    );
  }
  if (value === undefined || value === null) return `${JSON.stringify(key)}:null`;
  let valueJson: string;
  try {
    valueJson = anyValueJson(value, `${path}.value`, depth);
  } catch (error) {
    throw depth === 1 && error instanceof TooDeepError ? new TooDeepError(`attribute ${JSON.stringify(key)}`) : error;
  }
  return `${JSON.stringify(key)}:${valueJson}`;
}

/** A log record's body, a too deep one named as such. */
function bodyJson(body: unknown, path: string): string {
  try {
    return anyValueJson(body, path, 1);
  } catch (error) {
    throw error instanceof TooDeepError ? new TooDeepError('body') : error;
  }
}

function serviceNameOf(resource: Obj): string | null {
  const attributes = resource.attributes;
  if (!Array.isArray(attributes)) return null;
  const entry = attributes.find((kv) => (kv as Obj)?.key === 'service.name') as Obj | undefined;
  const value = entry?.value as Obj | undefined;
  return typeof value?.stringValue === 'string' ? value.stringValue : null;
}

/** An AnyValue as JSON; `depth` is its nesting level (objects and arrays count one each). */
function anyValueJson(value: unknown, path: string, depth: number): string {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new OtlpJsonError(`${path}: expected an AnyValue object, got ${describe(value)}`);
  }
  const v = value as Obj;
  const s = field(v, ['stringValue', 'string_value']);
  if (s !== undefined) {
    if (typeof s !== 'string') throw new OtlpJsonError(`${path}.stringValue: expected a string, got ${describe(s)}`);
    return JSON.stringify(s);
  }
  const b = field(v, ['boolValue', 'bool_value']);
  if (b !== undefined) {
    if (typeof b !== 'boolean') throw new OtlpJsonError(`${path}.boolValue: expected a boolean, got ${describe(b)}`);
    return String(b);
  }
  const i = field(v, ['intValue', 'int_value']);
  if (i !== undefined) {
    const text = integerText(i);
    if (text === null) throw new OtlpJsonError(`${path}.intValue: expected an integer, got ${describe(i)}`);
    return text;
  }
  const d = field(v, ['doubleValue', 'double_value']);
  if (d !== undefined) {
    const n = typeof d === 'string' ? Number(d) : d;
    if (typeof n !== 'number' || (Number.isNaN(n) && d !== 'NaN')) {
      throw new OtlpJsonError(`${path}.doubleValue: expected a number, got ${describe(d)}`);
    }
    return Number.isFinite(n) ? String(n) : `"${n}"`;
  }
  const arr = field(v, ['arrayValue', 'array_value']);
  const kvlist = field(v, ['kvlistValue', 'kvlist_value']);
  if ((arr !== undefined || kvlist !== undefined) && depth > MAX_NESTING_DEPTH) throw new TooDeepError(path); // named by the caller
  if (arr !== undefined) {
    const items = list(arr as Obj, `${path}.arrayValue`, 'values');
    return `[${items.map((item, k) => anyValueJson(item, `${path}.arrayValue.values[${k}]`, depth + 1)).join(',')}]`;
  }
  if (kvlist !== undefined) {
    const items = list(kvlist as Obj, `${path}.kvlistValue`, 'values');
    return `{${items.map((kv, k) => keyValueJson(kv, `${path}.kvlistValue.values[${k}]`, undefined, depth + 1)).join(',')}}`;
  }
  const bytes = field(v, ['bytesValue', 'bytes_value']);
  if (bytes !== undefined) {
    if (typeof bytes !== 'string')
      throw new OtlpJsonError(`${path}.bytesValue: expected base64 text, got ${describe(bytes)}`);
    return JSON.stringify(bytes);
  }
  return 'null';
}

function listJson(o: Obj, path: string, name: string, item: (o: Obj, path: string) => string): string {
  return `[${list(o, path, name)
    .map((x, i) => item(x, `${at(path, name)}[${i}]`))
    .join(',')}]`;
}

const at = (path: string, name: string) => (path ? `${path}.${name}` : name);

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object' && 'rawJSON' in value) return 'a number';
  return typeof value === 'string' ? `the string ${JSON.stringify(value.slice(0, 40))}` : `a ${typeof value}`;
}
