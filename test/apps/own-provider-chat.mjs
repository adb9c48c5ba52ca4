// One chat completion through fetch, in an app whose own tracer provider was registered before
// agl/register (own-tracer-provider.mjs); prints the names of the spans that provider recorded.
const answer = await fetch(`${process.env.OPENAI_BASE_URL}/chat/completions`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hello' }] }),
});
await answer.json();
// The call's span is finished after the app has its answer: wait for it rather than for a fixed time.
for (const deadline = Date.now() + 10_000; globalThis.ownSpans().length === 0 && Date.now() < deadline; ) {
  await new Promise((resolve) => setImmediate(resolve));
}
console.log(JSON.stringify(globalThis.ownSpans().map((span) => span.name)));
