/**
 * Rewards, annotations, messages, objects, exceptions and operations as spans, with Agent
 * Lightning's span names and attribute encoding, so its readers and agl's `rewards` view agree.
 * They use the global tracer: `agl/register` (or the app's own OpenTelemetry SDK) must be set up.
 */
import { context, SpanStatusCode, trace, type Attributes, type AttributeValue, type Span } from '@opentelemetry/api';
import { AGL, ATTR } from '../api/semconv.js';

const tracer = () => trace.getTracer('agl');

let warnedNoSdk = false;
function warnIfNotRecorded(span: Span, what: string): void {
  if (span.isRecording() || warnedNoSdk) return;
  warnedNoSdk = true;
  process.emitWarning(
    `agl: ${what} is not recorded: no OpenTelemetry SDK is registered (run the app with --import agl/register)`,
  );
}

/** A span that starts and ends at once, as Agent Lightning's annotations do. */
function instantSpan(name: string, attributes: Attributes, ok = true): void {
  const span = tracer().startSpan(name, { attributes });
  if (ok) span.setStatus({ code: SpanStatusCode.OK });
  warnIfNotRecorded(span, name);
  span.end();
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' &&
  value !== null &&
  !Array.isArray(value) &&
  (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null);

function homogeneousPrimitives(list: unknown[]): boolean {
  const type = typeof list[0];
  return (type === 'string' || type === 'number' || type === 'boolean') && list.every((item) => typeof item === type);
}

/** An attribute value as Agent Lightning sanitizes it: primitives kept, anything else as JSON. */
function attributeValue(value: unknown): AttributeValue {
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
  if (Array.isArray(value) && value.length > 0 && homogeneousPrimitives(value)) return value as AttributeValue;
  if (typeof value === 'bigint') return value.toString();
  try {
    return JSON.stringify(value ?? null) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Nested objects to dotted keys (`a.b`, list items as `a.0`); lists of one primitive type stay
 * one value; empty objects and lists give no key.
 */
function flattenAttributes(value: unknown, prefix = '', out: Attributes = {}): Attributes {
  if (Array.isArray(value)) {
    if (value.length === 0) return out;
    if (homogeneousPrimitives(value) && prefix !== '') out[prefix] = value as AttributeValue;
    else
      for (const [i, item] of value.entries())
        flattenAttributes(item, prefix === '' ? String(i) : `${prefix}.${i}`, out);
  } else if (isPlainObject(value)) {
    for (const [key, item] of Object.entries(value))
      flattenAttributes(item, prefix === '' ? key : `${prefix}.${key}`, out);
  } else {
    out[prefix] = attributeValue(value);
  }
  return out;
}

/** Records key/value annotations (tags, metadata, rewards) on a span of their own. */
export function emitAnnotation(annotation: Record<string, unknown>): void {
  if (!isPlainObject(annotation)) throw new TypeError('emitAnnotation needs a plain object of annotations');
  const attributes = flattenAttributes(annotation);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === 'null')
      throw new TypeError(
        `emitAnnotation: the value of "${key}" is null or undefined; annotations must be strings, numbers, booleans or lists of one of them`,
      );
  }
  instantSpan(AGL.annotation, attributes);
}

export interface RewardOptions {
  /** With several named rewards: the one that is the primary reward (it goes first). */
  readonly primaryKey?: string;
  /** Why the reward is what it is, kept as text beside it (the `rewards` view's `feedback`; APO's critic reads it). */
  readonly feedback?: string;
  /** More attributes for the reward span (links, tags). */
  readonly attributes?: Record<string, unknown>;
}

function checkReward(value: unknown, name?: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    const what = name === undefined ? 'the reward' : `the reward "${name}"`;
    throw new TypeError(
      `${what} must be a finite number, got ${value === null ? 'null' : typeof value === 'number' ? String(value) : typeof value}`,
    );
  }
  return value;
}

/**
 * Records a reward: one number (the primary reward), or named rewards with `primaryKey` naming
 * the primary one. Written as `agentlightning.reward.<i>.name` / `.value`, the primary at 0.
 */
export function emitReward(reward: number | Record<string, number>, options: RewardOptions = {}): void {
  let dimensions: { name: string; value: number }[];
  if (typeof reward === 'number') {
    dimensions = [{ name: 'primary', value: checkReward(reward) }];
  } else if (isPlainObject(reward)) {
    const entries = Object.entries(reward).map(([name, value]) => ({ name, value: checkReward(value, name) }));
    if (options.primaryKey === undefined)
      throw new TypeError('emitReward: named rewards need options.primaryKey, the name of the primary reward');
    const primary = entries.find((entry) => entry.name === options.primaryKey);
    if (!primary)
      throw new TypeError(
        `emitReward: primaryKey "${options.primaryKey}" is not one of the rewards (${Object.keys(reward).join(', ')})`,
      );
    dimensions = [primary, ...entries.filter((entry) => entry !== primary)];
  } else {
    throw new TypeError(
      `emitReward needs a number or an object of named numbers, got ${reward === null ? 'null' : typeof reward}`,
    );
  }
  if (options.attributes !== undefined && !isPlainObject(options.attributes))
    throw new TypeError('emitReward: options.attributes must be a plain object');
  if (options.feedback !== undefined && typeof options.feedback !== 'string')
    throw new TypeError(`emitReward: options.feedback must be a string, got ${typeof options.feedback}`);
  instantSpan(AGL.annotation, {
    ...flattenAttributes(dimensions, ATTR.reward),
    ...flattenAttributes(options.attributes ?? {}),
    ...(options.feedback === undefined ? {} : { [ATTR.rewardFeedback]: options.feedback }),
  });
}

/** Records a log-like message. */
export function emitMessage(message: string, attributes: Record<string, unknown> = {}): void {
  if (typeof message !== 'string')
    throw new TypeError(`emitMessage needs a string, got ${message === null ? 'null' : typeof message}`);
  instantSpan(AGL.message, { [ATTR.messageBody]: message, ...flattenAttributes(attributes) }, false);
}

function objectAttributes(value: unknown): Attributes {
  switch (typeof value) {
    case 'string':
      return { [ATTR.objectType]: 'str', [ATTR.objectLiteral]: value };
    case 'boolean':
      return { [ATTR.objectType]: 'bool', [ATTR.objectLiteral]: value ? 'True' : 'False' };
    case 'number':
      return { [ATTR.objectType]: Number.isInteger(value) ? 'int' : 'float', [ATTR.objectLiteral]: String(value) };
    case 'bigint':
      return { [ATTR.objectType]: 'int', [ATTR.objectLiteral]: value.toString() };
  }
  if (value instanceof Uint8Array)
    return { [ATTR.objectType]: 'bytes', [ATTR.objectLiteral]: Buffer.from(value).toString('base64') };
  let json: string | undefined;
  try {
    json = JSON.stringify(value ?? null);
  } catch (error) {
    throw new TypeError(`emitObject: the object must be JSON serializable (${(error as Error).message})`);
  }
  if (json === undefined) throw new TypeError(`emitObject: a ${typeof value} is not JSON serializable`);
  const type =
    value === null || value === undefined
      ? 'NoneType'
      : Array.isArray(value)
        ? 'list'
        : isPlainObject(value)
          ? 'dict'
          : ((value as object).constructor?.name ?? 'object');
  return { [ATTR.objectType]: type, [ATTR.objectJson]: json };
}

/** Records any value: primitives as literals, everything else as JSON. */
export function emitObject(value: unknown, attributes: Record<string, unknown> = {}): void {
  instantSpan(AGL.object, { ...objectAttributes(value), ...flattenAttributes(attributes) });
}

function exceptionAttributes(error: Error): Attributes {
  return {
    'exception.type': error.name || error.constructor?.name || 'Error',
    'exception.message': error.message,
    'exception.escaped': true,
    ...(error.stack ? { 'exception.stacktrace': error.stack } : {}),
  };
}

/** Records an error the agent handled (the span itself is OK, as in Agent Lightning). */
export function emitException(error: Error, attributes: Record<string, unknown> = {}): void {
  if (!(error instanceof Error))
    throw new TypeError(`emitException needs an Error, got ${error === null ? 'null' : typeof error}`);
  instantSpan(AGL.exception, { ...exceptionAttributes(error), ...flattenAttributes(attributes) });
}

/**
 * Wraps `fn` so that each call is an `agentlightning.operation` span named `name`, with the
 * arguments as `agentlightning.operation.input.args.<i>` and the result (awaited when it is a
 * promise) as `agentlightning.operation.output`. Spans created inside are its children; a
 * thrown error marks it failed and is rethrown.
 */
export function operation<A extends unknown[], R>(name: string, fn: (...args: A) => R): (...args: A) => R {
  if (typeof name !== 'string' || name === '') throw new TypeError('operation needs a name');
  if (typeof fn !== 'function') throw new TypeError('operation needs a function to wrap');
  return function (this: unknown, ...args: A): R {
    const span = tracer().startSpan(AGL.operation, {
      attributes: { [ATTR.operationName]: name, ...flattenAttributes(args, `${ATTR.operationInput}.args`) },
    });
    warnIfNotRecorded(span, 'operation');
    const fail = (error: unknown) => {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
      span.end();
    };
    const succeed = (result: unknown) => {
      span.setAttributes(flattenAttributes(result === undefined ? null : result, ATTR.operationOutput));
      span.end();
    };
    let result: R;
    try {
      result = context.with(trace.setSpan(context.active(), span), () => fn.apply(this, args));
    } catch (error) {
      fail(error);
      throw error;
    }
    if (result instanceof Promise) {
      return result.then(
        (value) => {
          succeed(value);
          return value;
        },
        (error) => {
          fail(error);
          throw error;
        },
      ) as R;
    }
    succeed(result);
    return result;
  };
}
