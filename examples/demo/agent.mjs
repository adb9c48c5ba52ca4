// The agent of `agl demo`: an ordinary `openai` program with no tracing code of its own. agl
// records its calls; its reward is whether the answer is right.
import OpenAI from 'openai';
import { rollout } from 'agl';

export default rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey });
  const completion = await client.chat.completions.create({
    model: ctx.llm.model,
    messages: [{ role: 'user', content: ctx.promptTemplate.format({ question: task.question }) }],
    ...ctx.llm.samplingParameters,
  });
  const said = completion.choices[0].message.content ?? '';
  return Number(said.trim().match(/-?\d+/)?.[0]) === task.answer ? 1 : 0;
});
