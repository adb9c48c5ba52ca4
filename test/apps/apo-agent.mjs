// The agent of the APO tests: asks the rollout's model with its prompt template filled in;
// reward 1 when the answer is the task's, with a feedback text that says why.
import OpenAI from 'openai';
import { emitReward, rollout } from 'agl';

export default rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey, maxRetries: 0 });
  const reply = await client.chat.completions.create({
    model: ctx.llm.model,
    messages: [{ role: 'user', content: ctx.promptTemplate.format({ question: task.question }) }],
  });
  const said = reply.choices[0].message.content;
  emitReward(said === task.answer ? 1 : 0, { feedback: said === task.answer ? 'right' : `expected ${task.answer}` });
});
