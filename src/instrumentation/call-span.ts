import {
  diag,
  isSpanContextValid,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type AttributeValue,
  type Context,
  type HrTime,
  type Link,
  type Span,
  type SpanContext,
  type SpanStatus,
  type TimeInput,
} from '@opentelemetry/api';
import { addHrTimes, hrTimeDuration, millisToHrTime } from '@opentelemetry/core';
import type { Resource } from '@opentelemetry/resources';
import { RandomIdGenerator, type ReadableSpan, type SpanProcessor, type TimedEvent } from '@opentelemetry/sdk-trace';
import { ATTR } from '../api/semconv.js';
import { currentRollout } from './rollout-context.js';

/** Starts the span of one captured LLM call. */
export type CallSpanStarter = (name: string, parent: Context) => Span;

/** Where call spans go, and what they are recorded under: the SDK's resource and agl's scope. */
export interface CallSpanTarget {
  readonly resource: Resource;
  readonly instrumentationScope: ReadableSpan['instrumentationScope'];
  /** The export pipeline's first stage (agl/register's SpanEncoder). */
  readonly processor: SpanProcessor;
}

const ids = new RandomIdGenerator();

/**
 * LLM call spans made without the SDK's span machinery, for agl/register with the default
 * sampler and no attribute limits (config.ts decides). An LLM call's span has no children, is
 * named, described and ended by the fetch capture alone, with attributes it builds itself, so the
 * SDK's work per span (sampler, span processors' onStart, checks of each attribute, end-of-span
 * bookkeeping) buys it nothing, and it is dear while V8 has not yet optimized code that runs once
 * a call (an app's first thousand calls): the start on the call's path took 23-29 us against
 * 10-13 for a call span (medians, bench app). Sampling is the default sampler's: a call under an
 * unsampled parent is not recorded; its request still carries its context.
 */
export function callSpanStarter(target: CallSpanTarget): CallSpanStarter {
  return (name, parent) => {
    const parentContext = trace.getSpanContext(parent);
    const valid = parentContext !== undefined && isSpanContextValid(parentContext);
    const context: SpanContext = {
      traceId: valid ? parentContext.traceId : ids.generateTraceId(),
      spanId: ids.generateSpanId(),
      traceFlags: valid ? parentContext.traceFlags & TraceFlags.SAMPLED : TraceFlags.SAMPLED,
      traceState: valid ? parentContext.traceState : undefined,
    };
    if (context.traceFlags !== TraceFlags.SAMPLED) return trace.wrapSpanContext(context);
    return new CallSpan(target, name, context, valid ? parentContext : undefined);
  };
}

/** A recording LLM call span: the subset of Span the fetch capture uses, and a ReadableSpan once ended. */
class CallSpan implements Span, ReadableSpan {
  readonly kind = SpanKind.CLIENT;
  readonly attributes: Attributes = {};
  readonly links: Link[] = [];
  readonly events: TimedEvent[] = [];
  /**
   * Times as the SDK's spans take them: the start from the wall clock, later times as the start
   * plus the monotonic clock's progress. Started from the monotonic clock's origin instead, a
   * span's start and an end given in epoch milliseconds (as the fetch capture gives it) came
   * from two clocks that drift apart in a long-lived process: a call's duration could come out
   * negative, and its place among the SDK's spans (a reward's match to its call) shifted.
   */
  readonly startTime: HrTime = millisToHrTime(Date.now());
  private readonly startedAt = performance.now();
  endTime: HrTime = [0, 0];
  status: SpanStatus = { code: SpanStatusCode.UNSET };
  ended = false;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly resource: Resource;
  readonly instrumentationScope: ReadableSpan['instrumentationScope'];

  constructor(
    private readonly target: CallSpanTarget,
    public name: string,
    private readonly context: SpanContext,
    readonly parentSpanContext: SpanContext | undefined,
  ) {
    this.resource = target.resource;
    this.instrumentationScope = target.instrumentationScope;
    // What RolloutSpanProcessor stamps on the SDK's spans as they start.
    const rollout = currentRollout();
    if (rollout) {
      this.attributes[ATTR.rolloutId] = rollout.rollout_id;
      if (rollout.attempt_id !== undefined) this.attributes[ATTR.attemptId] = rollout.attempt_id;
    }
  }

  private now(): HrTime {
    return addHrTimes(this.startTime, millisToHrTime(performance.now() - this.startedAt));
  }

  get duration(): HrTime {
    return hrTimeDuration(this.startTime, this.endTime);
  }

  spanContext(): SpanContext {
    return this.context;
  }

  isRecording(): boolean {
    return !this.ended;
  }

  updateName(name: string): this {
    if (!this.ended) this.name = name;
    return this;
  }

  setAttribute(key: string, value: AttributeValue | undefined): this {
    if (!this.ended && value !== undefined && value !== null) this.attributes[key] = value;
    return this;
  }

  setAttributes(attributes: Attributes): this {
    for (const key in attributes) this.setAttribute(key, attributes[key]);
    return this;
  }

  setStatus(status: SpanStatus): this {
    if (this.ended || status.code === SpanStatusCode.UNSET) return this;
    this.status =
      status.code === SpanStatusCode.ERROR && typeof status.message === 'string'
        ? { code: status.code, message: status.message }
        : { code: status.code };
    return this;
  }

  /** As the SDK's span records it: an `exception` event with the error's type, message and stack. */
  recordException(exception: unknown, time?: TimeInput): void {
    const attributes: Attributes = {};
    if (typeof exception === 'string') attributes['exception.message'] = exception;
    else if (exception && typeof exception === 'object') {
      const { code, name, message, stack } = exception as {
        code?: unknown;
        name?: string;
        message?: string;
        stack?: string;
      };
      if (code) attributes['exception.type'] = String(code);
      else if (name) attributes['exception.type'] = name;
      if (message) attributes['exception.message'] = message;
      if (stack) attributes['exception.stacktrace'] = stack;
    }
    if (attributes['exception.type'] || attributes['exception.message']) this.addEvent('exception', attributes, time);
  }

  addEvent(name: string, attributes?: Attributes, time?: TimeInput): this {
    if (!this.ended)
      this.events.push({
        name,
        attributes,
        time: typeof time === 'number' ? millisToHrTime(time) : this.now(),
        droppedAttributesCount: 0,
      });
    return this;
  }

  addLink(): this {
    return this;
  }

  addLinks(): this {
    return this;
  }

  /**
   * Ends the span and hands it on. A number is a `performance.now()` reading (when the fetch
   * capture saw the answer's last byte), as the SDK's spans read a number no later than
   * `performance.now()`: it is placed on this span's clock by its progress since the start.
   * Taken as epoch milliseconds, it came from another clock than the start's Date.now(), and a
   * fast call's duration came out negative.
   */
  end(endTime?: TimeInput): void {
    if (this.ended) return;
    this.ended = true;
    this.endTime =
      typeof endTime === 'number'
        ? addHrTimes(this.startTime, millisToHrTime(Math.max(0, endTime - this.startedAt)))
        : this.now();
    try {
      this.target.processor.onEnd(this);
    } catch (error) {
      diag.error('agl: an LLM call span could not be recorded', error); // never thrown into the app
    }
  }
}
