// One process, 20 rollouts at once: each call and reward belongs to its own rollout.
import OpenAI from 'openai';
import { emitReward, withRollout } from 'agl';

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
await Promise.all(
  Array.from({ length: 20 }, (_, i) =>
    withRollout({ rollout_id: `ro-${i}`, attempt_id: `at-${i}` }, async () => {
      await new Promise((resolve) => setTimeout(resolve, (i * 7) % 13));
      const answer = await client.chat.completions.create({
        model: 'slow-5',
        messages: [{ role: 'user', content: `task ${i}` }],
        stream: i % 2 === 0,
      });
      if (i % 2 === 0) for await (const _ of answer);
      emitReward(i / 10);
    }),
  ),
);
console.log('done');
