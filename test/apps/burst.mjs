// 20,000 spans in a tight loop, then exit: must neither crash nor hang, collector up or down.
import { trace } from '@opentelemetry/api';
const tracer = trace.getTracer('burst');
for (let i = 0; i < 20_000; i++) tracer.startSpan(`burst ${i}`).end();
console.log('created');
