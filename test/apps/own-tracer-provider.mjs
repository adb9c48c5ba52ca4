// Preloaded before agl/register: an app that registers a tracer provider of its own, recording
// to memory (globalThis.ownSpans).
import { trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';

const exporter = new InMemorySpanExporter();
globalThis.ownSpans = () => exporter.getFinishedSpans();
trace.setGlobalTracerProvider(new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }));
