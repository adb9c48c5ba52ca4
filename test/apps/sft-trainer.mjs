// An SFT run with the Trainer in-process, as a user's script: node sft-trainer.mjs DB OPTIONS_JSON TASKS_JSON
import OpenAI from 'openai';
import { rollout } from 'agl';
import { SFT } from 'agl/algorithms';
import { Trainer } from 'agl/trainer';

const [db, options, tasks] = process.argv.slice(2);
const agent = rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey });
  await client.chat.completions.create({ model: ctx.llm.model, messages: [{ role: 'user', content: task.question }] });
  return 1;
});
const result = await new Trainer({ algorithm: new SFT(JSON.parse(options)), db }).fit(agent, {
  train: JSON.parse(tasks),
});
console.log(`done ${JSON.stringify({ stopped: result.stopped, statuses: result.iterations.map((i) => i.status) })}`);
console.log(`cost ${JSON.stringify(result.cost)}`);
