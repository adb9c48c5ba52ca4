import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { judge, judgeGroup, JudgeError } from '../../src/algorithms/judge/judge.js';
import { startOpenAITestServer, type OpenAITestServer } from '../support/openai-server.js';

// The judge's tries: an answer that is not the verdict asked for is asked again; a call that
// failed is not, since the chat model already retried what may pass (429, 5xx) and a 401 or 404
// stays what it is.

let server: OpenAITestServer;
const asked = (model: string) => server.requests.filter((r) => r.body.model === model).length;

before(async () => {
  server = await startOpenAITestServer({
    chat: (request) =>
      request.model === 'judge'
        ? { content: '{"scores": [{"transcript": 1, "score": 0.75, "reason": "close"}]}' }
        : request.model === 'prose'
          ? { content: 'It looks fine to me.' }
          : {},
  });
});
after(() => server.close());

const settings = (model: string) => ({
  rubric: 'The answer is 5.',
  model,
  endpoint: server.baseURL,
  retries: 2,
  retryBackoffSeconds: 0.01,
  transcript: [{ role: 'assistant', content: '5' }],
});

test('a verdict comes with its reason, in the transcripts order', async () => {
  const group = await judgeGroup({ ...settings('judge'), transcripts: [[{ role: 'assistant', content: '5' }]] });
  assert.deepEqual(group.verdicts, [{ score: 0.75, reason: 'close' }]);
  assert.equal(group.tries, 1);
});

test('a 401 fails at once: one try, not one per retry', async () => {
  const error = await judge(settings('error-401')).then(
    () => assert.fail('the judge should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof JudgeError, String(error));
  assert.match(error.message, /judge error-401 failed: .*401/);
  assert.equal(error.call.tries, 1);
  assert.equal(asked('error-401'), 1);
});

test('a 503 is retried by the chat model, then fails without further tries', async () => {
  const error = await judge(settings('error-503')).then(
    () => assert.fail('the judge should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof JudgeError, String(error));
  assert.equal(error.call.tries, 3);
  assert.equal(asked('error-503'), 3);
});

test('an answer that is no verdict is asked again, then fails naming it', async () => {
  const error = await judge(settings('prose')).then(
    () => assert.fail('the judge should fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof JudgeError, String(error));
  assert.match(error.message, /answered no verdict: "It looks fine to me\." \(after 3 tries\)/);
  assert.equal(asked('prose'), 3);
});
