import { decodeTracesProtobuf } from '../src/collector/otlp-protobuf.js';
import { freshCopy, makeBatch } from '../test/otlp-batches.js';
const t = await makeBatch(512, { promptBytes: Number(process.env.PROMPT ?? 0) || undefined });
const bodies = Array.from({ length: 50 }, (_, i) => freshCopy(t, i));
for (let round = 0; round < 4; round++) {
  const s = performance.now();
  for (let k = 0; k < 4; k++) for (const b of bodies) decodeTracesProtobuf(b);
  console.log('decode spans/s', Math.round((200 * 512) / ((performance.now() - s) / 1000)));
}
