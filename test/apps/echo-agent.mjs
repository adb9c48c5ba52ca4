// An agent module for `agl runner`: answers through the rollout's llm, rewards an echo.
import OpenAI from 'openai';
import { rollout } from 'agl';

export default rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey });
  const answer = await client.chat.completions.create({
    model: ctx.llm.model,
    messages: [{ role: 'user', content: task.question }],
  });
  return answer.choices[0].message.content.includes(task.question) ? 1 : 0;
});
