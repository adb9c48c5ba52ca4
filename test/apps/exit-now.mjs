// Ends with process.exit() right after its last call and reward, as many scripts do.
import OpenAI from 'openai';
import { emitReward } from 'agl';

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
await client.chat.completions.create({ model: 'test-model', messages: [{ role: 'user', content: 'last call' }] });
emitReward(0.25);
process.exit(5);
