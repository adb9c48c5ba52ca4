// A LangChain.js agent with one tool (langchain's createAgent over ChatOpenAI).
import { ChatOpenAI } from '@langchain/openai';
import { createAgent, tool } from 'langchain';
import { z } from 'zod';
import { emitReward } from 'agl';

const getWeather = tool(async ({ city }) => `It is sunny in ${city}.`, {
  name: 'get_weather',
  description: 'The weather of a city',
  schema: z.object({ city: z.string() }),
});
const model = new ChatOpenAI({
  model: 'test-model',
  apiKey: 'test-key',
  configuration: { baseURL: process.env.OPENAI_BASE_URL },
});
const agent = createAgent({ model, tools: [getWeather] });
const result = await agent.invoke({ messages: [{ role: 'user', content: 'Weather in Paris?' }] });
emitReward(1);
console.log(JSON.stringify({ answer: result.messages.at(-1).content, messages: result.messages.length }));
