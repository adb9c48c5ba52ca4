// Preloaded into `agl serve` by the soak benchmark (node --import): every AGL_MEMORY_PROBE_MS,
// the main thread's process.memoryUsage() as a JSON line in AGL_MEMORY_PROBE_FILE. RSS alone
// cannot say whether agl's own objects grow (the JS heap) or DuckDB's memory does (outside it).
import { appendFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const file = process.env.AGL_MEMORY_PROBE_FILE;
if (isMainThread && file) {
  const started = performance.now();
  setInterval(
    () => {
      const { rss, heapUsed } = process.memoryUsage();
      appendFileSync(file, `${JSON.stringify({ seconds: (performance.now() - started) / 1000, rss, heapUsed })}\n`);
    },
    Number(process.env.AGL_MEMORY_PROBE_MS ?? 10_000),
  ).unref();
}
