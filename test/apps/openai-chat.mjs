// An agent as users write it: the `openai` package, one call with a tool, one streamed call,
// and a reward. It knows nothing of agl beyond emitReward. Prints what it got, as JSON.
import { emitReward } from 'agl';

const { default: OpenAI } = await import(process.env.OPENAI_PACKAGE ?? 'openai');
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];

const first = await client.chat.completions.create({
  model: 'test-model',
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Weather in Paris?' },
  ],
  tools,
  temperature: 0.5,
});
const call = first.choices[0].message.tool_calls[0];

const stream = await client.chat.completions.create({
  model: 'test-model',
  stream: true,
  stream_options: { include_usage: true },
  messages: [
    { role: 'user', content: 'Weather in Paris?' },
    first.choices[0].message,
    { role: 'tool', tool_call_id: call.id, content: 'sunny' },
    { role: 'user', content: 'thanks' },
  ],
});
let text = '';
for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';

emitReward(0.75);
console.log(JSON.stringify({ toolCall: call.function, text }));
