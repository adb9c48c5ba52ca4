import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

/** An OTLP serializer's output: undefined only when it failed, which fails the test. */
export function serialized(bytes: Uint8Array | undefined): Buffer {
  if (bytes === undefined) throw new Error('the OTLP serializer failed');
  return Buffer.from(bytes);
}

export interface BatchTemplate {
  /** An ExportTraceServiceRequest encoded by the official serializer. */
  readonly body: Buffer;
  readonly spanCount: number;
  /** Byte offsets of every trace id in `body`, for `freshCopy`. */
  readonly traceIdOffsets: number[];
}

/**
 * Spans made with the real SDK and encoded by the official OTLP serializer: `count` spans of
 * `rolloutId` and `attemptId` (default at-1) with about ten attributes, or an LLM-sized prompt
 * when `promptBytes` is given.
 */
export async function makeBatch(
  count: number,
  options: { rolloutId?: string; attemptId?: string; promptBytes?: number } = {},
): Promise<BatchTemplate> {
  const exporter = new InMemorySpanExporter();
  const provider = new TracerProvider({
    resource: resourceFromAttributes({
      'service.name': 'agl-bench',
      ...(options.rolloutId ? { 'agentlightning.rollout_id': options.rolloutId } : {}),
    }),
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer('agl-batches');
  const prompt = options.promptBytes
    ? 'You are a helpful agent. '.repeat(Math.ceil(options.promptBytes / 25)).slice(0, options.promptBytes)
    : undefined;
  for (let i = 0; i < count; i++) {
    const span = tracer.startSpan(`chat step-${i % 16}`, {
      attributes: {
        'gen_ai.operation.name': 'chat',
        'gen_ai.system': 'openai',
        'gen_ai.request.model': 'gpt-4o-mini',
        'gen_ai.request.temperature': 0.7,
        'gen_ai.request.max_tokens': 512,
        'gen_ai.response.id': `chatcmpl-${i}`,
        'gen_ai.response.finish_reasons': ['stop'],
        'gen_ai.usage.input_tokens': 100 + i,
        'gen_ai.usage.output_tokens': 20 + (i % 50),
        'agentlightning.attempt_id': options.attemptId ?? 'at-1',
        ...(prompt ? { 'gen_ai.prompt.0.role': 'user', 'gen_ai.prompt.0.content': prompt } : {}),
      },
    });
    span.end();
  }
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans();
  const body = serialized(ProtobufTraceSerializer.serializeRequest(spans));
  const traceIdOffsets: number[] = [];
  for (const span of spans) {
    const id = Buffer.from(span.spanContext().traceId, 'hex');
    for (let at = body.indexOf(id); at >= 0; at = body.indexOf(id, at + 1)) traceIdOffsets.push(at);
  }
  await provider.shutdown();
  return { body, spanCount: spans.length, traceIdOffsets };
}

/** A copy of the template whose spans all have new trace ids (so none is a re-delivery). */
export function freshCopy(template: BatchTemplate, serial: number): Buffer {
  const body = Buffer.from(template.body);
  for (const at of template.traceIdOffsets) {
    body.writeUInt32BE(serial >>> 0, at);
    body.writeUInt32BE(Math.floor(serial / 2 ** 32), at + 4);
  }
  return body;
}
