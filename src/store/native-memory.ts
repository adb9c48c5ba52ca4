import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** What the watch reads and does: the process's RSS in bytes, and a full collection of the JS heap. */
export interface NativeMemoryProbe {
  rss(): number;
  collect(): void;
}

/** The watch's settings: how often it looks, and the growth of RSS since the last collection that starts one. */
export interface NativeMemoryWatchOptions {
  everyMs: number;
  stepBytes: number;
}

const DEFAULTS: NativeMemoryWatchOptions = { everyMs: 5_000, stepBytes: 64 * 2 ** 20 };

/**
 * DuckDB's results, data chunks and connections free their native memory when V8 collects their
 * JS objects, and V8 does not know how much memory stands behind them: a server whose JS heap
 * is 30-70 MB and grows slowly ran minutes between full collections, while the memory of the
 * queries since waited (the soak, 4 minutes: RSS slope 1,877-2,284 MB/hour and highest sample
 * 495-603 MB; with a full collection every 3 s, 734 MB/hour and 424 MB). So whenever RSS has
 * grown by `stepBytes` since the last full collection, the watch runs one: each costs the main
 * thread 10-40 ms, and comes at most every `everyMs`.
 */
export function watchNativeMemory(probe: NativeMemoryProbe, options: NativeMemoryWatchOptions = DEFAULTS): () => void {
  // RSS after the last collection, or lower since: what a query's memory freed is not growth.
  let low = probe.rss();
  const timer = setInterval(() => {
    const rss = probe.rss();
    low = Math.min(low, rss);
    if (rss - low < options.stepBytes) return;
    probe.collect();
    low = probe.rss();
  }, options.everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

let processProbe: NativeMemoryProbe | undefined;
/**
 * This process's probe: RSS, and V8's full collection. Node gives the collector to scripts
 * started with --expose-gc alone; the flag set now holds for contexts made after it, so a new
 * context hands it over.
 */
export function processMemoryProbe(): NativeMemoryProbe {
  if (processProbe === undefined) {
    setFlagsFromString('--expose-gc');
    const collect = runInNewContext('gc') as () => void;
    processProbe = { rss: () => process.memoryUsage.rss(), collect };
  }
  return processProbe;
}

let holders = 0;
let stopProcessWatch: (() => void) | undefined;

/**
 * Holds this process's watch while a DuckDB file is open (DuckDBFile), one watch for any number
 * of files. Returns its release.
 */
export function holdNativeMemoryWatch(): () => void {
  if (holders++ === 0) stopProcessWatch = watchNativeMemory(processMemoryProbe());
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (--holders === 0) stopProcessWatch?.();
  };
}
