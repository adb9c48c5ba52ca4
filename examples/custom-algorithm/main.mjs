// A first algorithm written by hand (Agent Lightning's tutorial, in agl): try prompt templates
// one by one and keep the best. Three terminals:
//   1. npm run agl -- store                                                   (the store)
//   2. node --import agl/register examples/custom-algorithm/main.mjs runner   (runs rollouts)
//   3. node examples/custom-algorithm/main.mjs algo                           (the algorithm)
// Offline it uses agl's example model server (not a language model); with OPENAI_API_KEY set,
// and OPENAI_BASE_URL / AGL_DEMO_MODEL if needed, a real model.
import OpenAI from 'openai';
import { Runner, findFinalReward, rollout } from 'agl';
import { StoreClient } from 'agl/client';
import { EXAMPLE_MODEL, startExampleModel } from 'agl/server';

const storeUrl = process.argv.includes('--store')
  ? process.argv[process.argv.indexOf('--store') + 1]
  : 'http://127.0.0.1:4318';
const store = new StoreClient(storeUrl);

const TASK = { question: 'What is 17 * 3?', answer: 51 };
const TEMPLATES = ['{question}', 'Answer with the number only. {question}', '{question} Think it over, then reply.'];

// The agent: asks the model with the rollout's prompt template; reward 1 when the first number it says is right.
const agent = rollout(async (task, ctx) => {
  const client = new OpenAI({ baseURL: ctx.llm.baseURL, apiKey: ctx.llm.apiKey });
  const reply = await client.chat.completions.create({
    model: ctx.llm.model,
    messages: [{ role: 'user', content: ctx.promptTemplate.format({ question: task.question }) }],
  });
  const said = reply.choices[0].message.content ?? '';
  return Number(said.match(/-?\d+/)?.[0]) === task.answer ? 1 : 0;
});

async function runner() {
  console.log(`runner: taking rollouts from ${storeUrl} (Ctrl-C to stop)`);
  const stop = new AbortController();
  process.once('SIGINT', () => stop.abort());
  process.once('SIGTERM', () => stop.abort());
  await new Runner({ store, agent, gatewayUrl: storeUrl }).run(stop.signal);
}

async function algo() {
  const example = process.env.OPENAI_API_KEY ? undefined : await startExampleModel();
  const llm = {
    resource_type: 'llm',
    endpoint: example?.baseURL ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
    model: example ? EXAMPLE_MODEL : (process.env.AGL_DEMO_MODEL ?? 'gpt-4o-mini'),
    api_key: process.env.OPENAI_API_KEY ?? null,
    sampling_parameters: { temperature: 0 },
  };
  if (example) console.log('algo: using the offline EXAMPLE model server (rule-based, not a language model)');
  const results = [];
  for (const template of TEMPLATES) {
    const { resources_id } = await store.addResources({
      prompt: { resource_type: 'prompt_template', template, engine: 'f-string' },
      llm,
    });
    const { rollout_id } = await store.enqueueRollout({ input: TASK, resources_id });
    console.log(`algo: template ${JSON.stringify(template)} -> rollout ${rollout_id}; waiting`);
    await store.waitForRollouts([rollout_id], 60);
    const { items: spans } = await store.querySpans({ rollout_id, sort_by: 'sequence_id' });
    const reward = findFinalReward(spans);
    console.log(`algo: ${spans.length} span(s), reward ${reward}`);
    results.push({ template, reward });
  }
  await example?.close();
  console.log('\nalgo: results');
  for (const { template, reward } of results) console.log(`  ${reward ?? '-'}  ${JSON.stringify(template)}`);
  const best = results.reduce((a, b) => ((b.reward ?? -Infinity) > (a.reward ?? -Infinity) ? b : a));
  console.log(`algo: best template: ${JSON.stringify(best.template)} (reward ${best.reward})`);
}

const command = process.argv[2];
if (command === 'runner') await runner();
else if (command === 'algo') await algo();
else {
  console.error('usage: node examples/custom-algorithm/main.mjs runner|algo [--store URL]');
  process.exitCode = 2;
}
