import assert from 'node:assert/strict';
import { hasSubscribers } from 'node:diagnostics_channel';
import { after, before, test } from 'node:test';
import { context, propagation } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { FetchCapture } from '../../src/instrumentation/fetch-capture.js';
import { runApp } from '../support/instrumented-app.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// The fetch capture in this process (the child-process tests cover agl/register as a whole):
// what happens to the span of an answer the app drops without reading it, and the trace context
// each request carries; what disable() puts back.

const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
const capture = new FetchCapture({ tracer: provider.getTracer('test'), captureContent: true, returnTokenIds: false });
let llm: OpenAITestServer;

/** The descriptors of Response's readers, which the capture wraps. */
const responseReaders = () =>
  ['text', 'json', 'arrayBuffer', 'body'].map((name) => Object.getOwnPropertyDescriptor(Response.prototype, name));
/** What the process had before the capture was enabled. */
const fetchBefore = globalThis.fetch;
const ResponseBefore = globalThis.Response;
const readersBefore = responseReaders();

before(async () => {
  llm = await startOpenAITestServer();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  capture.enable();
});

after(() => llm.close());

const chat = (content: string) =>
  fetch(`${llm.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }] }),
  });

test('an answer dropped unread ends its span a minute later; one being read is left to its reader', async () => {
  exporter.reset();
  const dropped = await chat('dropped');
  const slow = await chat('read later');
  const reading = slow.text(); // begun now, so no longer unread, however long it takes

  capture.endUnreadAnswers(Date.now() + 59_000);
  assert.equal(exporter.getFinishedSpans().length, 0, 'not before a minute has passed');

  capture.endUnreadAnswers(Date.now() + 61_000);
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

test("each request carries the traceparent of its own span; the app's headers are left as they were", async () => {
  exporter.reset();
  llm.requests.length = 0;
  const headers = new Headers({ 'content-type': 'application/json', authorization: 'Bearer app' });
  const body = (content: string) => JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }] });
  // Concurrent calls, an HTTP call among them, and a Request object: each gets its own span's id.
  const answers = await Promise.all([
    fetch(`${llm.baseURL}/chat/completions`, { method: 'POST', headers, body: body('first') }),
    fetch(new Request(`${llm.baseURL}/chat/completions`, { method: 'POST', headers, body: body('second') })),
    fetch(`${llm.baseURL}/files`, { method: 'POST', headers, body: '{}' }),
  ]);
  await Promise.all(answers.map((answer) => answer.text()));
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  assert.deepEqual(
    [...headers.keys()],
    ['authorization', 'content-type'],
    "the app's Headers object gets no traceparent",
  );

  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 3);
  const sent = llm.requests.map((request) => request.headers.traceparent);
  for (const span of spans) {
    const { traceId, spanId } = span.spanContext();
    assert.equal(
      sent.filter((value) => value === `00-${traceId}-${spanId}-01`).length,
      1,
      `one request carries ${span.name}'s context`,
    );
  }
  assert.equal(new Set(sent).size, 3);

  // Inside the app's own span, the call's span is its child, and the server sees the call's.
  exporter.reset();
  llm.requests.length = 0;
  const step = await provider.getTracer('app').startActiveSpan('agent step', async (step) => {
    await (await fetch(`${llm.baseURL}/chat/completions`, { method: 'POST', headers, body: body('third') })).text();
    step.end();
    return step;
  });
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  const call = exporter.getFinishedSpans().find((span) => span.name === 'chat test-model');
  assert.equal(call?.parentSpanContext?.spanId, step.spanContext().spanId);
  assert.equal(
    llm.requests[0].headers.traceparent,
    `00-${step.spanContext().traceId}-${call?.spanContext().spanId}-01`,
  );

  // A traceparent the app sets itself is sent as it is, once.
  llm.requests.length = 0;
  const own = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  await (
    await fetch(`${llm.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: own },
      body: body('fourth'),
    })
  ).text();
  assert.equal(llm.requests[0].headers.traceparent, own);
});

test('disable() puts fetch and Response back as they were and records nothing; enable() records again', async () => {
  capture.disable();
  capture.disable(); // a second time changes nothing
  assert.equal(globalThis.fetch, fetchBefore);
  assert.equal(globalThis.Response, ResponseBefore);
  const readers = responseReaders();
  for (const [i, before] of readersBefore.entries()) {
    assert.equal(readers[i]?.value, before?.value);
    assert.equal(readers[i]?.get, before?.get);
  }
  assert.equal(hasSubscribers('undici:request:create'), false, "undici's channel is left");

  exporter.reset();
  llm.requests.length = 0;
  await (await chat('not recorded')).json();
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  assert.equal(exporter.getFinishedSpans().length, 0);
  assert.equal(llm.requests[0].headers.traceparent, undefined);

  capture.enable();
  capture.enable(); // wrapped once: one span per call
  assert.notEqual(globalThis.fetch, fetchBefore);
  llm.requests.length = 0;
  await (await chat('recorded again')).json();
  await new Promise((resolve) => setImmediate(() => setImmediate(resolve)));
  const spans = exporter.getFinishedSpans();
  assert.equal(spans.length, 1);
  const { traceId, spanId } = spans[0].spanContext();
  assert.equal(llm.requests[0].headers.traceparent, `00-${traceId}-${spanId}-01`);
});

// A sweep left running would keep the app alive (the guard below only keeps a hang from lasting).
test('a process that enables and disables the capture ends by itself, no interval left', {
  timeout: 60_000,
}, async () => {
  const run = await runApp('fetch-capture-toggle.mjs', { OPENAI_BASE_URL: llm.baseURL }, { register: false });
  assert.equal(run.code, 0, run.stderr);
  assert.deepEqual(JSON.parse(run.stdout), { spans: 1, intervals: 0 });
});
