// No client library: the completions API through fetch, plain and streamed.
const url = `${process.env.OPENAI_BASE_URL}/completions`;
const post = (body) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const plain = await (await post({ model: 'test-model', prompt: 'one two' })).json();
const streamed = await (await post({ model: 'test-model', prompt: 'three four', stream: true })).text();
const failed = await post({ model: 'error-503', prompt: 'x' });
await failed.text();
await (await fetch(`${process.env.OPENAI_BASE_URL}/models`)).json();
// An answer the app never reads: its span still arrives, ended at exit.
await fetch(`${process.env.OPENAI_BASE_URL}/embeddings`, {
  method: 'POST',
  body: JSON.stringify({ model: 'test-model', input: 'never read' }),
});
// JSON answers read as bytes and through the body's reader.
const bytes = new TextDecoder().decode(await (await post({ model: 'test-model', prompt: 'five six' })).arrayBuffer());
let read = '';
for await (const chunk of (await post({ model: 'test-model', prompt: 'seven eight' })).body)
  read += new TextDecoder().decode(chunk);
if (
  JSON.parse(bytes).choices[0].text !== ' Echo: five six' ||
  JSON.parse(read).choices[0].text !== ' Echo: seven eight'
)
  process.exit(3);
console.log(
  JSON.stringify({ plain: plain.choices[0].text, chunks: streamed.split('data: ').length - 1, failed: failed.status }),
);
