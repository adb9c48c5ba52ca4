import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SeverityNumber } from '@opentelemetry/api-logs';
import { ProtobufLogsSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { InMemoryLogRecordExporter, LoggerProvider, SimpleLogRecordProcessor } from '@opentelemetry/sdk-logs';
import type { ByteColumn, ColumnarRows, Int64Column } from '../src/otlp/columns.js';
import { ProtobufDecoder } from '../src/otlp/protobuf-decoder.js';
import { FIXTURES } from '../test/support/helpers.js';
import { freshCopy, makeBatch } from '../test/support/otlp-batches.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';
import { ProtobufjsOtlp } from './protobufjs-otlp.js';

const BATCH = 512;
/** Rounds of each decoder, interleaved; a round decodes `requests` bodies. */
const ROUNDS = 15;

interface Shape {
  readonly key: string;
  readonly signal: 'traces' | 'logs';
  /** Bodies decoded in a round. */
  readonly requests: number;
  /** Distinct bodies (new trace ids each, as ingest sends), decoded in turn. */
  bodies(): Promise<Buffer[]>;
}

/** The ingest benchmark's requests (small spans, LLM-sized spans with a 4 KB prompt), and GenAI log records. */
const SHAPES: Shape[] = [
  { key: 'small', signal: 'traces', requests: 20, bodies: () => traceBodies() },
  { key: 'llm', signal: 'traces', requests: 6, bodies: () => traceBodies(4096) },
  { key: 'logs', signal: 'logs', requests: 20, bodies: async () => [await logBody()] },
];

async function traceBodies(promptBytes?: number): Promise<Buffer[]> {
  const template = await makeBatch(BATCH, { rolloutId: undefined, promptBytes });
  return Array.from({ length: 8 }, (_, i) => freshCopy(template, i + 1));
}

/** BATCH GenAI event records as the SDK's logs exporter sends them: a kvlist body, a few attributes. */
async function logBody(): Promise<Buffer> {
  const exporter = new InMemoryLogRecordExporter();
  const provider = new LoggerProvider({
    resource: resourceFromAttributes({ 'service.name': 'agl-bench' }),
    processors: [new SimpleLogRecordProcessor({ exporter })],
  });
  const logger = provider.getLogger('agl-bench-logs');
  for (let i = 0; i < BATCH; i++) {
    logger.emit({
      eventName: 'gen_ai.choice',
      severityNumber: SeverityNumber.INFO,
      body: {
        index: 0,
        finish_reason: 'stop',
        message: { role: 'assistant', content: `The answer to question ${i} is ${i * 7}.` },
      },
      attributes: {
        'gen_ai.system': 'openai',
        'event.name': 'gen_ai.choice',
        'agentlightning.attempt_id': 'at-1',
        'gen_ai.response.id': `chatcmpl-${i}`,
      },
    });
  }
  await provider.forceFlush();
  const body = ProtobufLogsSerializer.serializeRequest(exporter.getFinishedLogRecords());
  await provider.shutdown();
  assert.ok(body);
  return Buffer.from(body);
}

interface Decoder {
  readonly key: string;
  decode(body: Buffer): unknown;
  mbPerSecond: number[];
}

/**
 * The hand-written protobuf decoder against protobufjs on the same requests, interleaved round
 * by round: protobufjs's decode alone (message objects), and its decode with the conversion to
 * the same rows, the output the server needs.
 */
export const decode: Benchmark = {
  name: 'decode',
  description: `OTLP protobuf decoding, hand-written vs protobufjs, ${BATCH}-item requests, MB per CPU second`,
  async run(size: Size): Promise<Figure[]> {
    const ours = new ProtobufDecoder();
    const library = new ProtobufjsOtlp();
    const sameRows = (signal: 'traces' | 'logs', body: Buffer, what: string) => {
      const theirs = signal === 'traces' ? library.tracesBatch(body) : library.logsBatch(body);
      const mine = signal === 'traces' ? ours.decodeTraces(body) : ours.decodeLogs(body);
      assert.deepEqual(
        rowValues(theirs.rows),
        rowValues(mine.rows),
        `${what}: protobufjs and the hand-written decoder differ`,
      );
    };
    // The fixtures have what the bench's requests lack (events, links, every kind of value).
    sameRows('traces', await readFile(join(FIXTURES, 'traces.pb')), 'traces.pb');
    sameRows('logs', await readFile(join(FIXTURES, 'logs.pb')), 'logs.pb');
    const figures: Figure[] = [];
    for (const shape of SHAPES) {
      const bodies = await shape.bodies();
      const traces = shape.signal === 'traces';
      sameRows(shape.signal, bodies[0], shape.key);
      const decoders: Decoder[] = [
        {
          key: 'hand_written',
          decode: traces ? (b) => ours.decodeTraces(b) : (b) => ours.decodeLogs(b),
          mbPerSecond: [],
        },
        {
          key: 'protobufjs',
          decode: traces ? (b) => library.decodeTraces(b) : (b) => library.decodeLogs(b),
          mbPerSecond: [],
        },
        {
          key: 'protobufjs_to_rows',
          decode: traces ? (b) => library.tracesBatch(b) : (b) => library.logsBatch(b),
          mbPerSecond: [],
        },
      ];
      measure(decoders, bodies, sized(size, shape.requests, 1), sized(size, ROUNDS, 1));
      const [handWritten, decodeOnly, toRows] = decoders.map((d) => median(d.mbPerSecond));
      const prefix = `decode.${shape.key}`;
      figures.push(
        { name: `${prefix}.request_kb`, value: Math.round(bodies[0].length / 1024), unit: 'KB', target: '' },
        { name: `${prefix}.hand_written_mb_per_s`, value: round(handWritten, 1), unit: 'MB/s', target: '' },
        { name: `${prefix}.protobufjs_mb_per_s`, value: round(decodeOnly, 1), unit: 'MB/s', target: '' },
        { name: `${prefix}.protobufjs_to_rows_mb_per_s`, value: round(toRows, 1), unit: 'MB/s', target: '' },
        {
          name: `${prefix}.hand_written_vs_protobufjs`,
          value: round(handWritten / decodeOnly, 2),
          unit: 'ratio',
          target: '',
        },
        {
          name: `${prefix}.hand_written_vs_protobufjs_to_rows`,
          value: round(handWritten / toRows, 2),
          unit: 'ratio',
          target: '>= 1.5',
        },
      );
    }
    return figures;
  },
};

/**
 * Warms each decoder up, then `rounds` rounds of `requests` bodies each, decoders in turn (order
 * alternating). Time is the process's CPU time (GC threads included), not the wall clock: on a
 * machine whose cores other work shares, a round's wall time is mostly waiting for a core.
 */
function measure(decoders: Decoder[], bodies: Buffer[], requests: number, rounds: number): void {
  for (const d of decoders) for (let i = 0; i < 3 * requests; i++) d.decode(bodies[i % bodies.length]);
  for (let round = 0; round < rounds; round++) {
    for (const d of round % 2 === 0 ? decoders : [...decoders].reverse()) {
      let bytes = 0;
      const start = process.cpuUsage();
      for (let i = 0; i < requests; i++) {
        const body = bodies[(round + i) % bodies.length];
        d.decode(body);
        bytes += body.length;
      }
      const { user, system } = process.cpuUsage(start);
      d.mbPerSecond.push(bytes / (user + system));
    }
  }
}

/** The rows as values, column by column (bytes as text), to compare two decoders' output. */
function rowValues(rows: ColumnarRows): unknown[][] {
  return rows.columns.map((column) => {
    if (Array.isArray(column)) return column;
    const c = column as ByteColumn | Int64Column;
    return Array.from({ length: rows.length }, (_, i) => {
      if (c.nulls[i]) return null;
      if (c.kind === 'int64') return c.values[i];
      return Buffer.from(c.data.subarray(c.slices[2 * i], c.slices[2 * i + 1])).toString('utf8');
    });
  });
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));
const median = (values: number[]) =>
  percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
