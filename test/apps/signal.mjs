// A long-running agent stopped by SIGTERM after its first call: the call's span must arrive.
import OpenAI from 'openai';
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
await client.chat.completions.create({
  model: 'test-model',
  messages: [{ role: 'user', content: 'before the signal' }],
});
console.log('called');
setInterval(() => {}, 1000);
