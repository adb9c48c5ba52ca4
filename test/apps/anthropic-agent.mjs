// A Claude agent as users write it: `@anthropic-ai/sdk` (a tool call, its result turn streamed,
// an error answer, a stream cut off, a token count) and LangChain's ChatAnthropic, against
// ANTHROPIC_BASE_URL, then a reward. Prints what the clients got, as JSON.
import Anthropic from '@anthropic-ai/sdk';
import { ChatAnthropic } from '@langchain/anthropic';
import { emitReward } from 'agl';

const client = new Anthropic({ apiKey: 'test-key', maxRetries: 0 });
const tools = [
  {
    name: 'get_weather',
    description: 'Weather of a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
const system = [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }];
const question = { role: 'user', content: 'Weather in Paris?' };

const plain = await client.messages.create({
  model: 'claude-test',
  max_tokens: 64,
  system,
  tools,
  messages: [question],
});
const toolUse = plain.content.find((block) => block.type === 'tool_use');

const stream = client.messages.stream({
  model: 'claude-test',
  max_tokens: 64,
  system,
  tools,
  thinking: { type: 'enabled', budget_tokens: 1024 },
  messages: [
    question,
    { role: 'assistant', content: plain.content },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: toolUse.id, content: 'sunny' },
        { type: 'text', text: 'thanks' },
      ],
    },
  ],
});
const streamed = await stream.finalMessage();

const failure = await client.messages.create({ model: 'error-529', max_tokens: 8, messages: [question] }).then(
  () => 'no error',
  (error) => error.status,
);

let cutText = '';
const cut = await client.messages
  .stream({ model: 'cut-stream', max_tokens: 8, messages: [{ role: 'user', content: 'a b c' }] })
  .on('text', (text) => (cutText += text))
  .finalMessage()
  .then(
    () => 'not cut',
    (error) => error.name,
  );

const counted = await client.messages.countTokens({ model: 'claude-test', messages: [question] });

const model = new ChatAnthropic({
  model: 'claude-test',
  apiKey: 'test-key',
  maxTokens: 64,
  clientOptions: { baseURL: process.env.ANTHROPIC_BASE_URL },
});
const langchain = await model.invoke([
  ['system', 'You are terse.'],
  ['human', 'Hello LangChain'],
]);

emitReward(1);
console.log(JSON.stringify({ plain, streamed, failure, cut, cutText, counted, langchain: langchain.content }));
