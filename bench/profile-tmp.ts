import { join } from 'node:path';
import { decodeTracesProtobuf } from '../src/collector/otlp-protobuf.js';
import { DuckDBStore } from '../src/store/store.js';
import { newTempDir } from '../test/helpers.js';
import { freshCopy, makeBatch } from '../test/otlp-batches.js';

const t = await makeBatch(512, { promptBytes: Number(process.env.PROMPT ?? 0) || undefined });
const n = Number(process.env.N ?? 200);
const decoded = Array.from({ length: n }, (_, i) => decodeTracesProtobuf(freshCopy(t, i)));
const dir = await newTempDir();
const store = await DuckDBStore.open({ path: join(dir, 'p.duckdb') });
const s = performance.now();
let next = 0;
const w = async () => { while (next < n) await store.writeSpans(decoded[next++].rows, 1); };
await Promise.all(Array.from({ length: 8 }, w));
const el = performance.now() - s;
console.log('write spans/s (8 in flight)', Math.round((n * 512) / (el / 1000)));
await store.close();
