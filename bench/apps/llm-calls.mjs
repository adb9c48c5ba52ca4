// The app the instrumentation benchmark times: CALLS sequential chat completions through the
// `openai` package; prints the per-call times (ms) after WARMUP calls, and how much the heap
// grew meanwhile (after a full GC, so garbage not yet collected does not count), and the CPU time
// the app spent per call.
import OpenAI from 'openai';

const calls = Number(process.env.CALLS ?? 2000);
const warmup = Number(process.env.WARMUP ?? 200);
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'bench' });
const times = [];
let heapAfterWarmup = 0;
let cpuAfterWarmup;
const liveHeap = () => {
  globalThis.gc?.();
  return process.memoryUsage().heapUsed;
};
for (let i = 0; i < warmup + calls; i++) {
  if (i === warmup) {
    heapAfterWarmup = liveHeap();
    cpuAfterWarmup = process.cpuUsage();
  }
  const start = performance.now();
  await client.chat.completions.create({ model: 'bench', messages: [{ role: 'user', content: `call ${i}` }] });
  if (i >= warmup) times.push(performance.now() - start);
}
const cpu = process.cpuUsage(cpuAfterWarmup);
const cpuMsPerCall = (cpu.user + cpu.system) / 1000 / calls;
console.log(JSON.stringify({ times, cpuMsPerCall, heapGrowthMb: (liveHeap() - heapAfterWarmup) / 2 ** 20 }));
