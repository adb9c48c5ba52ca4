// The instrumentation bench's second measure: in one process (started with keep-fetch.mjs, then
// agl/register), blocks of sequential calls alternate between the original fetch and agl's, so
// that the machine's drift hits both alike. Prints the median call time of each and the median,
// over block pairs, of agl's minus the original's (ms).
import OpenAI from 'openai';

const original = globalThis.__aglBenchOriginalFetch;
const recorded = globalThis.fetch;
if (typeof original !== 'function' || original === recorded)
  throw new Error('start with --import keep-fetch.mjs --import agl/register');
let withAgl = false;
const client = new OpenAI({
  baseURL: process.env.OPENAI_BASE_URL,
  apiKey: 'bench',
  fetch: (input, init) => (withAgl ? recorded : original)(input, init),
});
const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1];

async function block(agl, calls) {
  withAgl = agl;
  const times = [];
  for (let i = 0; i < calls; i++) {
    const start = performance.now();
    await client.chat.completions.create({ model: 'bench', messages: [{ role: 'user', content: `call ${i}` }] });
    times.push(performance.now() - start);
  }
  return median(times);
}

for (let i = 0; i < 6; i++) await block(i % 2 === 1, 100); // warm-up
const plain = [];
const agl = [];
for (let i = 0; i < Number(process.env.BLOCKS ?? 20); i++) {
  plain.push(await block(false, 200));
  agl.push(await block(true, 200));
}
console.log(JSON.stringify({ plain: median(plain), agl: median(agl), added: median(agl.map((t, i) => t - plain[i])) }));
