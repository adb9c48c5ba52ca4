import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { endUnreadAnswers, installFetchCapture } from '../src/instrumentation/fetch-capture.js';
import { startOpenAITestServer, type OpenAITestServer } from './openai-server.js';

// The fetch capture in this process (the child-process tests cover agl/register as a whole):
// what happens to the span of an answer the app drops without reading it.

const exporter = new InMemorySpanExporter();
let llm: OpenAITestServer;

before(async () => {
  llm = await startOpenAITestServer();
  const tracer = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }).getTracer('test');
  installFetchCapture({ tracer, captureContent: true, returnTokenIds: false });
});

after(() => llm.close());

const chat = (content: string) => fetch(`${llm.baseURL}/chat/completions`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }] }),
});

test('an answer dropped unread ends its span a minute later; one being read is left to its reader', async () => {
  exporter.reset();
  const dropped = await chat('dropped');
  const slow = await chat('read later');
  const reading = slow.text(); // begun now, so no longer unread, however long it takes

  endUnreadAnswers(Date.now() + 59_000);
  assert.equal(exporter.getFinishedSpans().length, 0, 'not before a minute has passed');

  endUnreadAnswers(Date.now() + 61_000);
  const [ended] = exporter.getFinishedSpans();
  assert.equal(exporter.getFinishedSpans().length, 1);
  assert.equal(ended.name, 'chat test-model');
  assert.equal(ended.attributes['http.response.status_code'], 200);
  assert.equal(ended.attributes['agl.llm.response'], undefined, 'its answer was never seen');
  assert.ok(dropped.body, 'the response itself is untouched');

  const answer = JSON.parse(await reading);
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve))); // the span is finished after the next request
  const read = exporter.getFinishedSpans().find((span) => span !== ended);
  assert.equal(read?.attributes['agl.llm.response'], JSON.stringify(answer), 'the answer being read is recorded whole');
});
