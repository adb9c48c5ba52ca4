import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { FetchCapture } from '../../src/instrumentation/fetch-capture.js';
import { startAnthropicTestServer, type AnthropicTestServer } from '../support/anthropic-server.js';

// Anthropic streams that reach their end and are still no whole answer, through the real SDK and
// the fetch capture in this process: an `error` event mid-way, and no `message_stop`. What
// arrived is kept on the span, and the span says what went wrong (as for a cut connection).

const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
const capture = new FetchCapture({ tracer: provider.getTracer('test'), captureContent: true, returnTokenIds: false });
let llm: AnthropicTestServer;
let client: Anthropic;

before(async () => {
  llm = await startAnthropicTestServer();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  capture.enable();
  client = new Anthropic({ baseURL: llm.url, apiKey: 'test-key', maxRetries: 0 });
});
after(async () => {
  capture.disable();
  await llm.close();
});

/** Streams a call to `model`; answers what the SDK said and the call's span once it ended. */
async function streamed(model: string): Promise<{ got: string; span: ReadableSpan }> {
  exporter.reset();
  const got = await client.messages
    .stream({ model, max_tokens: 8, messages: [{ role: 'user', content: 'a b c' }] })
    .finalMessage()
    .then(
      (message) => `message ${message.stop_reason}`,
      (error: Error) => error.message,
    );
  // The span is finished off the app's path, after its next request or at the latest here.
  capture.finishAnsweredCalls();
  const [span] = exporter.getFinishedSpans();
  assert.ok(span, 'the call has its span');
  return { got, span };
}

const response = (span: ReadableSpan) => JSON.parse(String(span.attributes['agl.llm.response']));

test('an error event mid-way: the text before it kept, the span an error of its type', async () => {
  const { got, span } = await streamed('error-mid-stream');
  assert.match(got, /Overloaded/);
  assert.equal(span.status.code, 2);
  assert.equal(span.status.message, 'the stream reported an error: Overloaded');
  assert.equal(span.attributes['error.type'], 'overloaded_error');
  assert.deepEqual(response(span).content, [{ type: 'text', text: 'Echo: ' }]);
});

test('a stream without message_stop: the whole answer kept, the span says it is incomplete', async () => {
  const { span } = await streamed('no-message-stop');
  assert.equal(span.status.code, 2);
  assert.equal(span.status.message, 'the stream ended without message_stop');
  assert.equal(span.attributes['error.type'], 'stream_incomplete');
  assert.equal(response(span).stop_reason, 'end_turn');
  assert.deepEqual(response(span).content, [{ type: 'text', text: 'Echo: a b c' }]);
});

test('a whole stream is no error', async () => {
  const { got, span } = await streamed('claude-test');
  assert.equal(got, 'message end_turn');
  assert.equal(span.status.code, 0);
  assert.equal(span.attributes['error.type'], undefined);
});
