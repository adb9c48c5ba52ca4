// Enables the fetch capture, makes one LLM call, disables it and ends by itself: disable() leaves
// no timer behind. Every interval is kept referenced here (the capture's unref() is ignored), so
// one left running would keep this process alive. Prints the spans recorded and the intervals
// still set.
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { FetchCapture } from '../../dist/src/instrumentation/fetch-capture.js';

const live = new Set();
const { setInterval: set, clearInterval: clear } = globalThis;
globalThis.setInterval = (...args) => {
  const timer = set(...args);
  timer.unref = () => timer;
  live.add(timer);
  return timer;
};
globalThis.clearInterval = (timer) => {
  live.delete(timer);
  clear(timer);
};

const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
const capture = new FetchCapture({ tracer: provider.getTracer('toggle'), captureContent: true, returnTokenIds: false });
capture.enable();
const answer = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'toggle' }] }),
});
await answer.json();
capture.disable();
console.log(JSON.stringify({ spans: exporter.getFinishedSpans().length, intervals: live.size }));
