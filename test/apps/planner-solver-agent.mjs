// The two-prompt agent of the GEPA and APO tests and the prompt-optimizers bench: a planner
// works out the task's first step ("What is A + B?"), a solver finishes from the planner's number
// ("S * C"). Each step earns half the reward; the feedback says, step by step, what went wrong.
import OpenAI from 'openai';
import { emitReward, rollout } from 'agl';

const format = (template, values) => template.replace(/\{(\w+)\}/g, (_, name) => String(values[name]));
// The planner may answer in a sentence ("3 plus 4 makes 7"): its result is the last number.
const lastNumber = (text) => Number([...text.matchAll(/-?\d+/g)].at(-1)?.[0]);

export default rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey, maxRetries: 0 });
  const ask = async (name, values) => {
    const reply = await client.chat.completions.create({
      model: ctx.llm.model,
      messages: [{ role: 'user', content: format(ctx.resources[name].template, values) }],
    });
    return reply.choices[0].message.content ?? '';
  };
  const planned = await ask('planner', { question: `What is ${task.a} + ${task.b}?` });
  const step = lastNumber(planned);
  const said = (await ask('solver', { step, rest: `* ${task.c}` })).trim();
  const problems = [];
  if (step !== task.a + task.b)
    problems.push(`planner: ${task.a} + ${task.b} was answered ${step}; it is ${task.a + task.b}: double-check it`);
  if (!/^-?\d+$/.test(said)) problems.push(`solver: answered in a sentence (${said}); the number only was wanted`);
  else if (Number(said) !== step * task.c)
    problems.push(`solver: ${step} * ${task.c} was answered ${said}; it is ${step * task.c}: double-check it`);
  const reward = (step === task.a + task.b ? 0.5 : 0) + (said === String((task.a + task.b) * task.c) ? 0.5 : 0);
  emitReward(reward, { feedback: problems.join('\n') || 'both steps right' });
});
