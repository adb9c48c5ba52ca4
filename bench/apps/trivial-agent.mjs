// The runtime benchmark's agent: one LLM call to the local test server, one reward.
import OpenAI from 'openai';
import { rollout } from 'agl';

export default rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: 'bench', maxRetries: 0 });
  const answer = await client.chat.completions.create({
    model: ctx.llm.model,
    messages: [{ role: 'user', content: `task ${task.i}` }],
  });
  return answer.choices[0].message.content ? 1 : 0;
});
