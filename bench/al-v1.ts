import { join } from 'node:path';
import { httpRequest } from '../src/client/http-request.js';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import { startLlmServer } from './gateway.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

const RUNNERS = 32;
const MODEL = 'bench-model';

type Json = Record<string, unknown>;

/** A JSON call to agl; anything but `expect` throws, naming the call. */
async function call(url: string, method: string, body?: unknown, expect = 200): Promise<unknown> {
  const answer = await httpRequest(
    url,
    method,
    { 'content-type': 'application/json' },
    body === undefined ? undefined : JSON.stringify(body),
    60_000,
  );
  if (answer.status !== expect) throw new Error(`${method} ${url}: ${answer.status} ${answer.body.slice(0, 300)}`);
  return answer.body ? JSON.parse(answer.body) : null;
}

const chatBody = { model: 'agent', messages: [{ role: 'user', content: 'hello there' }] };

/** Runs `work` on RUNNERS concurrent runners until `next` has nothing left. */
async function runners(next: () => string | undefined, work: (rolloutId: string) => Promise<void>): Promise<void> {
  await Promise.all(
    Array.from({ length: RUNNERS }, async () => {
      for (let id = next(); id !== undefined; id = next()) await work(id);
    }),
  );
}

/**
 * agl's v0 loop: the trainer enqueues, runners dequeue, call the model through the gateway,
 * report a reward (feedback on the rollout) and end the attempt; the trainer waits for them and
 * reads each rollout's spans.
 */
async function v0Loop(base: string, count: number): Promise<number> {
  const started = performance.now();
  const made = (await call(
    `${base}/v1/agl/queues/rollouts/enqueue`,
    'POST',
    {
      rollouts: Array.from({ length: count }, (_, i) => ({ input: { i }, mode: 'train' })),
    },
    201,
  )) as Json[];
  let left = count;
  await runners(
    () => (left-- > 0 ? 'next' : undefined),
    async () => {
      const [taken] = (await call(`${base}/v1/agl/queues/rollouts/dequeue`, 'POST', { worker_id: 'w' })) as Json[];
      const rid = taken.rollout_id as string;
      const aid = (taken.attempt as Json).attempt_id as string;
      await call(`${base}/v1/gateway/rollouts/${rid}/attempts/${aid}/v1/chat/completions`, 'POST', chatBody);
      await call(
        `${base}/v1/agl/feedback`,
        'POST',
        { rollout_id: rid, attempt_id: aid, name: 'reward', value: 1 },
        201,
      );
      await call(`${base}/v1/agl/rollouts/${rid}/attempts/${aid}`, 'POST', { status: 'succeeded' });
    },
  );
  const ids = made.map((r) => r.rollout_id as string);
  const done = (await call(`${base}/v1/agl/waits/rollouts`, 'POST', { rollout_ids: ids, timeout: 60 })) as Json[];
  if (done.length !== count) throw new Error(`v0: ${done.length} of ${count} rollouts finished`);
  for (const id of ids) await call(`${base}/v1/agl/spans?rollout_id=${id}`, 'GET');
  return count / ((performance.now() - started) / 1000);
}

/**
 * Agent Lightning v1's loop: the trainer enqueues a group with its own ids, the controller moves
 * each rollout to running, its agent calls the proxy and posts a reward event, the controller
 * marks it succeeded; the trainer follows the terminal cursor, reads each rollout's triplets
 * and deletes it, as AglAsyncRolloutManager does.
 */
async function v1Loop(base: string, count: number, round: number): Promise<number> {
  const started = performance.now();
  const ids = Array.from({ length: count }, (_, i) => `v1-${round}-${i}`);
  const { total_terminal: before } = (await call(`${base}/api/rollouts/terminal?limit=1`, 'GET')) as Json;
  await call(
    `${base}/api/rollouts`,
    'POST',
    ids.map((rollout_id, i) => ({ rollout_id, input: { i } })),
    201,
  );
  const queue = [...ids];
  const agents = runners(
    () => queue.shift(),
    async (rid) => {
      await call(`${base}/api/rollouts/${rid}`, 'PATCH', { status: { state: 'running', last_attempt_id: '0' } });
      await call(`${base}/proxy/rollout/${rid}/attempt/0/mode/train/openai/v1/chat/completions`, 'POST', chatBody);
      await call(`${base}/api/rollouts/${rid}/attempt/0/events`, 'POST', { event_type: 'reward', data: { value: 1 } });
      await call(`${base}/api/rollouts/${rid}`, 'PATCH', { status: { state: 'succeeded' } });
    },
  );
  let after = before as number;
  let read = 0;
  let agentsDone = false;
  void agents.then(() => (agentsDone = true));
  while (read < count) {
    const page = (await call(`${base}/api/rollouts/terminal?after=${after}&limit=1000`, 'GET')) as Json;
    after = page.next_after as number;
    for (const item of page.items as Json[]) {
      const events = (await call(`${base}/api/rollouts/${item.rollout_id}/events?format=triplet`, 'GET')) as Json[];
      if (!events.some((e) => e.event_type === 'model_request') || !events.some((e) => e.event_type === 'reward'))
        throw new Error(`v1: rollout ${item.rollout_id} lacks its call or reward: ${JSON.stringify(events)}`);
      await call(`${base}/api/rollouts/${item.rollout_id}`, 'DELETE', undefined, 204);
      read++;
    }
    if ((page.items as Json[]).length === 0) {
      if (agentsDone && read < count) throw new Error(`v1: ${read} of ${count} rollouts reached the trainer`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  await agents;
  return count / ((performance.now() - started) / 1000);
}

/** How many rows of `table` the rollouts whose id starts with `prefix` have (what the loops stored). */
async function rowsOf(base: string, table: string, where: string): Promise<number> {
  const answer = (await call(`${base}/v1/agl/query`, 'POST', {
    sql: `SELECT count(*) AS n FROM ${table} WHERE ${where}`,
  })) as {
    rows: { n: number }[];
  };
  return Number(answer.rows[0].n);
}

/**
 * Rollouts per second through Agent Lightning v1's API and proxy against the same loop through
 * agl's v0 API and gateway, on one server in one run, rounds alternating; then every rollout's
 * call and reward counted in SQL.
 */
export const alV1: Benchmark = {
  name: 'al-v1',
  description: `Agent Lightning v1 API + proxy vs agl's v0 API + gateway (${RUNNERS} runners, a model call and a reward each)`,
  async run(size: Size): Promise<Figure[]> {
    const [count, rounds] = sized(size, [1000, 3], [40, 1]);
    const dir = await newTempDir();
    const llm = await startLlmServer();
    const serve = await spawnServe([
      '--quiet',
      '--db',
      join(dir, 'al-v1-bench.duckdb'),
      '--upstream',
      llm.baseURL,
      '--v1-model',
      MODEL,
    ]);
    const base = serve.url;
    try {
      await call(`${base}/api/models`, 'POST', [{ model: MODEL, endpoint: llm.baseURL, version: 1 }], 201);
      await v0Loop(base, Math.min(count, 100));
      await v1Loop(base, Math.min(count, 100), -1);
      const v0: number[] = [];
      const v1: number[] = [];
      for (let round = 0; round < rounds; round++) {
        v0.push(await v0Loop(base, count));
        v1.push(await v1Loop(base, count, round));
      }
      const best = (rates: number[]) => Math.max(...rates);
      const v1Calls = await rowsOf(base, 'llm_calls', "rollout_id LIKE 'v1-%' AND rollout_id NOT LIKE 'v1--1-%'");
      const v1Rewards = await rowsOf(base, 'rewards', "rollout_id LIKE 'v1-%' AND rollout_id NOT LIKE 'v1--1-%'");
      const lost = 2 * count * rounds - v1Calls - v1Rewards;
      return [
        { name: `v1 API + proxy, ${RUNNERS} runners`, value: Math.round(best(v1)), unit: 'rollouts/s', target: '' },
        { name: `v0 API + gateway, ${RUNNERS} runners`, value: Math.round(best(v0)), unit: 'rollouts/s', target: '' },
        {
          name: 'v1 / v0 rollouts per second',
          value: Number((best(v1) / best(v0)).toFixed(2)),
          unit: 'ratio',
          target: '>= 0.8',
        },
        { name: 'v1 calls and rewards missing from SQL', value: lost, unit: 'rows', target: '<= 0' },
      ];
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
      llm.stop();
      await removeDir(dir);
    }
  },
};
