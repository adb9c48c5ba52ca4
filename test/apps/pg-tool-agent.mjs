// An agent whose tool queries PostgreSQL with the real `pg` client (DATABASE_URL): an LLM call
// with `openai`, the tool as an agl operation, then the answer turn, all in one rollout. Prints
// what the tool got, as JSON.
import { operation, withRollout } from 'agl';
import OpenAI from 'openai';
import pg from 'pg';

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
const database = new pg.Client({ connectionString: process.env.DATABASE_URL });
await database.connect();

const countOrders = operation('count_orders', async (city) => {
  const { rows } = await database.query('SELECT count(*)::int AS n FROM (VALUES ($1::text)) AS t(city)', [city]);
  return rows[0].n;
});

const orders = await withRollout({ rollout_id: 'ro-pg', attempt_id: 'at-pg' }, async () => {
  const ask = (content) =>
    client.chat.completions.create({ model: 'test-model', messages: [{ role: 'user', content }] });
  await ask('How many orders in Paris?');
  const n = await countOrders('Paris');
  await ask(`There are ${n} orders.`);
  return n;
});
await database.end();
process.stdout.write(JSON.stringify({ orders }));
