// No client library: the completions API through fetch, plain and streamed.
const url = `${process.env.OPENAI_BASE_URL}/completions`;
const post = (body) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const plain = await (await post({ model: 'test-model', prompt: 'one two' })).json();
const streamed = await (await post({ model: 'test-model', prompt: 'three four', stream: true })).text();
const failed = await post({ model: 'error-503', prompt: 'x' });
await failed.text();
await (await fetch(`${process.env.OPENAI_BASE_URL}/models`)).json();
// An answer the app never reads: its span still arrives, ended at exit.
await fetch(`${process.env.OPENAI_BASE_URL}/embeddings`, { method: 'POST', body: JSON.stringify({ model: 'test-model', input: 'never read' }) });
console.log(JSON.stringify({ plain: plain.choices[0].text, chunks: streamed.split('data: ').length - 1, failed: failed.status }));
