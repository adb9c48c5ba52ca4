// An app that uses the OpenTelemetry API for more than spans: a log record (as GenAI
// instrumentations emit their events) and a metric. Under agl/register the log record belongs
// with the spans; the metric goes nowhere unless OTEL_METRICS_EXPORTER asks.
import { logs, metrics } from '@opentelemetry/api';

logs.getLogger('app').emit({ eventName: 'app.answer', body: { text: 'forty-two' }, attributes: { 'app.turn': 1 } });
metrics.getMeter('app').createCounter('app.requests').add(1);
// Long enough for a metric reader at OTEL_METRIC_EXPORT_INTERVAL=100 to export, were there one.
await new Promise((resolve) => setTimeout(resolve, 400));
console.log('done');
