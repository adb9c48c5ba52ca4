import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { spanRows, type SpanInput } from '../src/store/span-json.js';
import { DuckDBStore } from '../src/store/store.js';
import { newTempDir, removeDir } from '../test/support/helpers.js';
import { rolloutSpans, timeCli } from './adapters.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';

// 20,000 rollouts of 12 spans (AGL_BENCH_SPANS_DIR_ROLLOUTS for another count).
const ROLLOUTS = Number(process.env.AGL_BENCH_SPANS_DIR_ROLLOUTS ?? 20_000);
const BATCH = 500;
const TURNS = 7;

/** Both stores get the same spans. */
async function fill(stores: DuckDBStore[], rollouts: number): Promise<void> {
  for (let r = 0; r < rollouts; r += BATCH) {
    const spans: SpanInput[] = [];
    for (let i = r; i < Math.min(rollouts, r + BATCH); i++) spans.push(...rolloutSpans(i));
    for (const store of stores) await store.writeSpans(spanRows(...spans), 0);
  }
}

/** The median time of a query, in ms, over `turns` runs after one to warm up. */
async function medianMs(store: DuckDBStore, sql: string, turns: number): Promise<number> {
  const times: number[] = [];
  for (let turn = 0; turn <= turns; turn++) {
    const start = performance.now();
    await store.query(sql, { guard: false });
    if (turn > 0) times.push(performance.now() - start);
  }
  return percentile(
    times.sort((x, y) => x - y),
    50,
  );
}

async function bytesUnder(dir: string): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir, { recursive: true })) {
    const info = await stat(join(dir, String(name)));
    if (info.isFile()) total += info.size;
  }
  return total;
}

/**
 * [figure, SQL, targets of the one file's and the directory's figures]: a rollout's calls are
 * what every rollout page and algorithm reads.
 */
const QUERIES: [string, string, string, string][] = [
  ['count(*) of spans', 'SELECT count(*) FROM spans', '', ''],
  ["one rollout's spans", "SELECT * FROM spans WHERE rollout_id = 'ro-777'", '', ''],
  ["one rollout's llm_calls", "SELECT * FROM llm_calls WHERE rollout_id = 'ro-777'", '< 20', '< 40'],
  ['rewards of every rollout', 'SELECT rollout_id, max(value) FROM rewards GROUP BY rollout_id', '', ''],
];

/**
 * A rollout's llm_calls as the directory read it before its derived-only views: through the
 * schema fleet's own view, which derives this file's spans not derived yet (none here) on the fly.
 */
const FLEET_VIEW_CALLS = "SELECT * FROM fleet.llm_calls WHERE rollout_id = 'ro-777'";

/**
 * The same through the derived-only view of every dialect, which reads planned while calls of
 * other dialects than agl's own are stored (here none: they plan its llm_calls of own calls).
 */
const EVERY_DIALECT_CALLS = "SELECT * FROM fleet_derived_only.llm_calls WHERE rollout_id = 'ro-777'";

/**
 * One server that moves its spans to a span directory against one that keeps them, in the same
 * run: the move (derive, write Parquet, delete), reads through the schema `fleet`, and
 * `agl export --spans-dir` against `agl export --db`.
 */
export const spansDir: Benchmark = {
  name: 'spans-dir',
  description: `span directory: ${ROLLOUTS} rollouts x 12 spans moved, read and exported`,
  async run(size: Size): Promise<Figure[]> {
    // The queries read rollout ro-777: the smoke run's rollouts include it.
    const rollouts = sized(size, ROLLOUTS, 800);
    const dir = await newTempDir();
    const spans = join(dir, 'spans');
    const figures: Figure[] = [];
    const ratio = (name: string, value: number): Figure => ({
      name,
      value: Number(value.toFixed(2)),
      unit: 'ratio',
      target: '',
    });
    try {
      const options = { deriveWhenIdleMs: Number.POSITIVE_INFINITY, spansMoveEveryMs: Number.POSITIVE_INFINITY };
      const one = await DuckDBStore.open({ path: join(dir, 'one.duckdb'), ...options });
      const moving = await DuckDBStore.open({ path: join(dir, 'moving.duckdb'), spansDir: spans, ...options });
      await fill([one, moving], rollouts);
      const count = rollouts * 12;
      let start = performance.now();
      await one.deriveAll();
      const deriveSeconds = (performance.now() - start) / 1000;
      start = performance.now();
      await moving.moveSpans();
      const moveSeconds = (performance.now() - start) / 1000;
      figures.push(
        { name: 'derive (the single server)', value: Math.round(count / deriveSeconds), unit: 'spans/s', target: '' },
        {
          name: 'move: derive, write Parquet, delete',
          value: Math.round(count / moveSeconds),
          unit: 'spans/s',
          target: '',
        },
        ratio('move / derive time', moveSeconds / deriveSeconds),
      );
      const turns = sized(size, TURNS, 1);
      for (const [name, sql, fileTarget, dirTarget] of QUERIES) {
        const [single, fleet] = [await medianMs(one, sql, turns), await medianMs(moving, sql, turns)];
        figures.push(
          { name: `${name}: one file`, value: Number(single.toFixed(1)), unit: 'ms', target: fileTarget },
          { name: `${name}: span directory`, value: Number(fleet.toFixed(1)), unit: 'ms', target: dirTarget },
          ratio(`${name}: directory / file`, fleet / single),
        );
      }
      const [fleetView, everyDialect, derivedOnly] = [
        await medianMs(moving, FLEET_VIEW_CALLS, turns),
        await medianMs(moving, EVERY_DIALECT_CALLS, turns),
        await medianMs(moving, QUERIES[2][1], turns),
      ];
      figures.push(
        {
          name: "one rollout's llm_calls: span directory, the fleet's view (the old path)",
          value: Number(fleetView.toFixed(1)),
          unit: 'ms',
          target: '',
        },
        ratio("one rollout's llm_calls: span directory, new / old path", derivedOnly / fleetView),
        {
          name: "one rollout's llm_calls: span directory, planned with every dialect",
          value: Number(everyDialect.toFixed(1)),
          unit: 'ms',
          target: '',
        },
        ratio(
          "one rollout's llm_calls: span directory, agl's own calls alone / every dialect",
          derivedOnly / everyDialect,
        ),
      );
      await one.close();
      await moving.close();
      const mb = (bytes: number) => Number((bytes / 1e6).toFixed(1));
      const [oneBytes, movedBytes, dirBytes] = [
        (await stat(join(dir, 'one.duckdb'))).size,
        (await stat(join(dir, 'moving.duckdb'))).size,
        await bytesUnder(spans),
      ];
      figures.push(
        { name: 'one file', value: mb(oneBytes), unit: 'MB', target: '' },
        { name: 'the moving file after the move', value: mb(movedBytes), unit: 'MB', target: '' },
        { name: 'the span directory', value: mb(dirBytes), unit: 'MB', target: '' },
      );
      for (const kind of ['triplets', 'messages']) {
        const fromFile = await timeCli([
          'export',
          kind,
          '--db',
          join(dir, 'one.duckdb'),
          '--out',
          join(dir, `one-${kind}.parquet`),
        ]);
        const fromDir = await timeCli([
          'export',
          kind,
          '--spans-dir',
          spans,
          '--out',
          join(dir, `dir-${kind}.parquet`),
        ]);
        figures.push(
          { name: `export ${kind}: one file`, value: Math.round(count / fromFile), unit: 'spans/s', target: '' },
          { name: `export ${kind}: --spans-dir`, value: Math.round(count / fromDir), unit: 'spans/s', target: '' },
          ratio(`export ${kind}: directory / file time`, fromDir / fromFile),
        );
      }
      return figures;
    } finally {
      await removeDir(dir);
    }
  },
};
