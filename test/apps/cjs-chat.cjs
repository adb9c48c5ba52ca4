// The same kind of agent as a CommonJS program (require), streamed and not.
const { emitReward } = require('agl');
const OpenAI = require(process.env.OPENAI_PACKAGE || 'openai');

async function main() {
  const client = new (OpenAI.default || OpenAI)({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
  const plain = await client.chat.completions.create({
    model: 'test-model',
    messages: [{ role: 'user', content: 'hello cjs' }],
  });
  const stream = await client.chat.completions.create({
    model: 'test-model',
    stream: true,
    messages: [{ role: 'user', content: 'stream cjs' }],
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content || '';
  emitReward({ correct: 1, brevity: 0.5 }, { primaryKey: 'correct' });
  console.log(JSON.stringify({ plain: plain.choices[0].message.content, text }));
  process.exitCode = 3; // the app's own exit code must survive
}
main();
