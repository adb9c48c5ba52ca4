import type { ByteColumnBuilder } from './column-builders.js';
import { noAttribution, type Attribution } from './batch.js';
import { TooDeepError } from './nesting.js';
import {
  type ExportLogsServiceRequest,
  ExportTraceServiceRequest,
  InstrumentationScope,
  Resource,
  type ResourceLogs,
  ResourceSpans,
  type ScopeLogs,
  ScopeSpans,
} from './otlp-proto.js';
import type { ProtobufReader } from './protobuf-reader.js';
import { nothingFound, type ValueWriter } from './protobuf-values.js';
import { LEN, tag } from './protobuf-wire.js';

/** The resource and scope that the spans or log records of one group share, as bytes. */
export interface Group {
  readonly resourceJson: Buffer;
  readonly serviceName: string | null;
  readonly attribution: Attribution;
  /** Why every item of the group is refused (its resource is nested too deep), or null. */
  readonly rejection: string | null;
  /** As bytes, checked for UTF-8 with the columns they are copied into. */
  scopeName: Buffer | null;
  scopeVersion: Buffer | null;
}

/** Reads the item (span, log record) that ends at `end` into the batch. */
type ItemReader = (r: ProtobufReader, end: number, group: Group) => void;

/** What a decoder keeps between requests for the walk: its ValueWriter, and a buffer to write a resource's JSON into. */
export interface WalkState {
  readonly values: ValueWriter;
  readonly scratch: ByteColumnBuilder;
}

// A logs request has the same shape as a traces request, field for field (ResourceLogs.scope_logs
// is ResourceSpans.scope_spans ...): one walk serves both, `satisfies` checks the numbers agree.
const REQUEST_RESOURCE_GROUPS = tag(
  ExportTraceServiceRequest.resource_spans satisfies typeof ExportLogsServiceRequest.resource_logs,
  LEN,
);
const GROUP_RESOURCE = tag(ResourceSpans.resource satisfies typeof ResourceLogs.resource, LEN);
const GROUP_SCOPE_GROUPS = tag(ResourceSpans.scope_spans satisfies typeof ResourceLogs.scope_logs, LEN);
const SCOPE_GROUP_SCOPE = tag(ScopeSpans.scope satisfies typeof ScopeLogs.scope, LEN);
const SCOPE_GROUP_ITEMS = tag(ScopeSpans.spans satisfies typeof ScopeLogs.log_records, LEN);
const SCOPE_NAME = tag(InstrumentationScope.name, LEN);
const SCOPE_VERSION = tag(InstrumentationScope.version, LEN);
const RESOURCE_ATTRIBUTES = tag(Resource.attributes, LEN);

const EMPTY_OBJECT = Buffer.from('{}');

/**
 * Walks Export*ServiceRequest -> Resource{Spans,Logs} -> Scope{Spans,Logs} -> items. The
 * resource and scope fields may follow the items on the wire, so each group is read twice:
 * first for its context, then for its items.
 */
export function forEachResourceGroup(r: ProtobufReader, state: WalkState, readItem: ItemReader): void {
  while (!r.done) {
    const t = r.tag();
    if (t !== REQUEST_RESOURCE_GROUPS) {
      r.skipField(t);
      continue;
    }
    const groupEnd = r.lengthDelimited();
    const groupStart = r.pos;
    let group = newGroup(EMPTY_OBJECT, null, noAttribution(), null);
    while (r.pos < groupEnd) {
      const gt = r.tag();
      if (gt === GROUP_RESOURCE) group = readResource(r, r.lengthDelimited(), state);
      else r.skipField(gt);
    }
    r.pos = groupStart;
    while (r.pos < groupEnd) {
      const gt = r.tag();
      if (gt === GROUP_SCOPE_GROUPS) {
        const scopeEnd = r.lengthDelimited();
        readScopeGroup(r, scopeEnd, group, readItem);
        r.pos = scopeEnd;
      } else r.skipField(gt);
    }
    r.pos = groupEnd;
  }
}

function readScopeGroup(r: ProtobufReader, end: number, group: Group, readItem: ItemReader): void {
  const start = r.pos;
  group.scopeName = null;
  group.scopeVersion = null;
  while (r.pos < end) {
    const t = r.tag();
    if (t === SCOPE_GROUP_SCOPE) readScope(r, r.lengthDelimited(), group);
    else r.skipField(t);
  }
  r.pos = start;
  while (r.pos < end) {
    const t = r.tag();
    if (t === SCOPE_GROUP_ITEMS) {
      const itemEnd = r.lengthDelimited();
      readItem(r, itemEnd, group);
      r.pos = itemEnd;
    } else r.skipField(t);
  }
}

function readScope(r: ProtobufReader, end: number, group: Group): void {
  while (r.pos < end) {
    const t = r.tag();
    if (t === SCOPE_NAME) group.scopeName = r.bytes();
    else if (t === SCOPE_VERSION) group.scopeVersion = r.bytes();
    else r.skipField(t);
  }
}

/** The group of a resource: its attributes as JSON, service.name and attribution among them. */
function readResource(r: ProtobufReader, end: number, { values, scratch: out }: WalkState): Group {
  const found = nothingFound();
  const start = out.size;
  let count = 0;
  try {
    while (r.pos < end) {
      const t = r.tag();
      if (t === RESOURCE_ATTRIBUTES) {
        out.writeByte(count++ === 0 ? 0x7b : 0x2c);
        values.writeKeyValue(r, r.lengthDelimited(), out, found);
      } else r.skipField(t);
    }
  } catch (error) {
    out.size = start;
    if (!(error instanceof TooDeepError)) throw error;
    r.pos = end;
    return newGroup(EMPTY_OBJECT, null, noAttribution(), `resource ${error.message}`);
  }
  if (count === 0) out.writeAscii('{');
  out.writeByte(0x7d);
  const resourceJson = Buffer.from(out.data.subarray(start, out.size));
  out.size = start;
  return newGroup(resourceJson, found.serviceName, found.attribution, null);
}

const newGroup = (
  resourceJson: Buffer,
  serviceName: string | null,
  attribution: Attribution,
  rejection: string | null,
): Group => ({
  resourceJson,
  serviceName,
  attribution,
  rejection,
  scopeName: null,
  scopeVersion: null,
});

/** The scope's name ("" when unnamed) and version (NULL when empty), as OTLP/JSON stores them. */
export function pushScope(name: ByteColumnBuilder, version: ByteColumnBuilder, group: Group): void {
  if (group.scopeName === null) name.push(null);
  else name.pushBytes(group.scopeName);
  if (group.scopeVersion === null || group.scopeVersion.length === 0) version.push(null);
  else version.pushBytes(group.scopeVersion);
}
