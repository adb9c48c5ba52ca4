// The agent of examples/grpo-trainer: a plain `openai` program of two turns, no training code.
// It asks for the target, sends the answer back with a follow-up and asks again; its reward
// is how close the final answer is to the task's target. agl records both calls (token ids
// and logprobs included, as the model server returns them) and turns them into GRPO rows.
import OpenAI from 'openai';
import { rollout } from 'agl';
import { similarity } from './reward.mjs';

export default rollout(async (task, ctx) => {
  if (!ctx.llm) throw new Error('this agent needs an llm resource (the model server)');
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey });
  const ask = async (messages) => {
    const completion = await client.chat.completions.create({
      model: ctx.llm.model,
      messages,
      max_tokens: 6, // the target and its stop token: "a b c" is 5 characters, each one token
      ...ctx.llm.samplingParameters,
    });
    return completion.choices[0].message.content ?? '';
  };
  const question = { role: 'user', content: task.prompt };
  const first = await ask([question]);
  const final = await ask([question, { role: 'assistant', content: first }, { role: 'user', content: task.followUp }]);
  return similarity(final, task.target);
});
