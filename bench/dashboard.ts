import { join } from 'node:path';
import { newTempDir, removeDir, spawnServe } from '../test/support/helpers.js';
import {
  attemptCallsSql,
  attemptRewardsSql,
  rolloutRewardsSql,
  type RolloutFilters,
  rolloutsPath,
} from '../web/src/queries.js';
import { fillDashboardStore } from './dashboard-data.js';
import { type Benchmark, type Figure, percentile, sized, type Size } from './figures.js';
import { cpuOf } from './process-cpu.js';

const ROLLOUTS = Number(process.env.AGL_BENCH_DASHBOARD_ROLLOUTS ?? 100_000);
const SPANS_PER_ROLLOUT = 50;
const ROUNDS = 40;

const FIRST_PAGE: RolloutFilters = { sort: 'start_time', order: 'desc', offset: 0, limit: 50 };

/** What the rollouts page asks for: its first page, filtered, sorted otherwise, further on. */
const CASES: [string, RolloutFilters][] = [
  ['first_page', FIRST_PAGE],
  ['failed', { ...FIRST_PAGE, status: 'failed' }],
  ['val_text', { ...FIRST_PAGE, mode: 'val', text: '+ 13?' }],
  ['by_status', { ...FIRST_PAGE, sort: 'status', order: 'asc' }],
  ['page_100', { ...FIRST_PAGE, offset: 99 * 50 }],
];

/**
 * The rollouts page on a store of 100,000 rollouts and 5 million spans: the two requests it
 * makes for a page (the store's list, then one SQL query for the page's final rewards), timed
 * together through `agl serve`'s HTTP API, as the browser waits for them. Then the rollout
 * page's SQL requests for an attempt (its calls with their credited rewards, its rewards), each
 * timed alone, with the server's CPU per request (wall times on a loaded machine are the load's).
 */
export const dashboard: Benchmark = {
  name: 'dashboard',
  description: `the rollouts page's requests on ${ROLLOUTS.toLocaleString()} rollouts and ${(ROLLOUTS * SPANS_PER_ROLLOUT).toLocaleString()} spans`,
  async run(size: Size): Promise<Figure[]> {
    // The smoke run's store still has a 100th page, and the fewest spans of a rollout: a root, its calls, a reward.
    const [rollouts, spansPerRollout, rounds] = sized(size, [ROLLOUTS, SPANS_PER_ROLLOUT, ROUNDS], [5_000, 12, 2]);
    const dir = await newTempDir();
    try {
      const db = join(dir, 'dashboard.duckdb');
      let start = performance.now();
      await fillDashboardStore(db, { rollouts, spansPerRollout, callsPerRollout: 10 });
      console.error(`  filled in ${((performance.now() - start) / 1000).toFixed(1)} s`);
      start = performance.now();
      const serve = await spawnServe(['--quiet', '--db', db]);
      console.error(`  agl serve opened it in ${((performance.now() - start) / 1000).toFixed(1)} s`);
      try {
        const rolloutsPage = await timeCases(serve.url, rounds);
        return [...rolloutsPage, ...(await timeRolloutPage(serve.url, serve.child.pid as number, rollouts, rounds))];
      } finally {
        serve.child.kill('SIGTERM');
        await serve.exited;
      }
    } finally {
      await removeDir(dir);
    }
  },
};

async function timeCases(url: string, rounds: number): Promise<Figure[]> {
  const figures: Figure[] = [];
  const all: number[] = [];
  // A server just opened still settles (its JIT, the GC after loading the state): the page in use is what counts.
  for (let i = 0; i < Math.min(20, rounds); i++) await loadPage(url, FIRST_PAGE);
  for (const [name, filters] of CASES) {
    await loadPage(url, filters); // warm: the first read of a query's data
    const times: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const start = performance.now();
      const rows = await loadPage(url, filters);
      times.push(performance.now() - start);
      if (rows === 0) throw new Error(`the rollouts page's ${name} found no rollouts`);
    }
    times.sort((a, b) => a - b);
    all.push(...times);
    figures.push({
      name: `dashboard.rollouts.${name}.p50`,
      value: round(percentile(times, 50)),
      unit: 'ms',
      target: '',
    });
    figures.push({
      name: `dashboard.rollouts.${name}.p99`,
      value: round(percentile(times, 99)),
      unit: 'ms',
      target: '< 300',
    });
  }
  all.sort((a, b) => a - b);
  figures.push({ name: 'dashboard.rollouts.p99', value: round(percentile(all, 99)), unit: 'ms', target: '< 300' });
  return figures;
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/** The rollout page's SQL requests for the first attempt of `rounds` rollouts spread over the store. */
async function timeRolloutPage(url: string, pid: number, rollouts: number, rounds: number): Promise<Figure[]> {
  const attempt = (k: number) => {
    const i = (k * 7919) % rollouts;
    return [`ro-${String(i).padStart(8, '0')}`, `at-${i}-1`] as const;
  };
  const requests: [string, (rolloutId: string, attemptId: string) => string][] = [
    ['calls', attemptCallsSql],
    ['rewards', attemptRewardsSql],
  ];
  const figures: Figure[] = [];
  for (const [name, sqlOf] of requests) {
    await query(url, sqlOf(...attempt(rounds)));
    const times: number[] = [];
    const cpuBefore = cpuOf(pid).own;
    for (let k = 0; k < rounds; k++) {
      const start = performance.now();
      const rows = await query(url, sqlOf(...attempt(k)));
      times.push(performance.now() - start);
      if (rows === 0) throw new Error(`the rollout page's ${name} found no rows for ${attempt(k).join(' ')}`);
    }
    const cpuMs = ((cpuOf(pid).own - cpuBefore) * 1000) / rounds;
    times.sort((a, b) => a - b);
    figures.push(
      { name: `dashboard.rollout.${name}.p50`, value: round(percentile(times, 50)), unit: 'ms', target: '' },
      { name: `dashboard.rollout.${name}.server_cpu`, value: round(cpuMs), unit: 'ms', target: '' },
    );
  }
  return figures;
}

/** The rows of a query through the query route. */
async function query(url: string, sql: string): Promise<number> {
  const answer = await json<{ rows: unknown[] }>(
    await fetch(`${url}/v1/agl/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sql }),
    }),
  );
  return answer.rows.length;
}

/** The page's list, then its final rewards; returns how many rollouts it shows. */
async function loadPage(url: string, filters: RolloutFilters): Promise<number> {
  const page = await json<{ items: { rollout_id: string }[] }>(await fetch(`${url}${rolloutsPath(filters)}`));
  const ids = page.items.map((r) => r.rollout_id);
  await query(url, rolloutRewardsSql(ids));
  return ids.length;
}

async function json<T>(response: Response): Promise<T> {
  if (!response.ok) throw new Error(`${response.url} answered ${response.status}: ${await response.text()}`);
  return (await response.json()) as T;
}
