// Preloaded into `agl serve` by the soak benchmark (node --import): every AGL_MEMORY_PROBE_MS,
// the main thread's process.memoryUsage() and where RSS lives (/proc/self/smaps) as a JSON line
// in AGL_MEMORY_PROBE_FILE. RSS alone cannot say whether agl's own objects grow (the JS heap,
// buffers), or native memory does, and whose: glibc's heaps (the main one, and the 64 MiB arenas
// of other threads) hold what C++ allocates with malloc; DuckDB's allocator maps memory of its own.
import { appendFileSync, readFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const ARENA = 64 * 2 ** 20;

/** RSS in bytes by kind of mapping: glibc's main heap, glibc's thread arenas, other anonymous, files. */
function rssByMapping() {
  const kinds = { brk: 0, arenas: 0, anonymous: 0, files: 0 };
  let kind = 'anonymous';
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const mapping = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (mapping) {
      const [, from, to, name] = mapping;
      const start = Number.parseInt(from, 16);
      const size = Number.parseInt(to, 16) - start;
      if (name === '[heap]') kind = 'brk';
      else if (name.startsWith('/')) kind = 'files';
      // A thread's arena: a 64 MiB-aligned mapping of up to 64 MiB (the rest reserved after it).
      else if (name === '' && start % ARENA === 0 && size <= ARENA) kind = 'arenas';
      else kind = 'anonymous';
    } else if (line.startsWith('Rss:')) {
      kinds[kind] += Number(/(\d+)/.exec(line)?.[1] ?? 0) * 1024;
    }
  }
  return kinds;
}

const file = process.env.AGL_MEMORY_PROBE_FILE;
if (isMainThread && file) {
  const started = performance.now();
  setInterval(
    () => {
      const { rss, heapUsed, heapTotal, external, arrayBuffers } = process.memoryUsage();
      const sample = {
        seconds: (performance.now() - started) / 1000,
        rss,
        heapUsed,
        heapTotal,
        external,
        arrayBuffers,
      };
      appendFileSync(file, `${JSON.stringify({ ...sample, ...rssByMapping() })}\n`);
    },
    Number(process.env.AGL_MEMORY_PROBE_MS ?? 10_000),
  ).unref();
}
