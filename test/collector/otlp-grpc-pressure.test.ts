import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { exportClient, RETRY_UNAVAILABLE } from '../support/grpc-client.js';
import { startAgl, tempDir } from '../support/helpers.js';
import { freshCopy, makeBatch } from '../support/otlp-batches.js';

// A full write queue over OTLP/gRPC: UNAVAILABLE with the delay to wait, where each kind of
// exporter reads it, and nothing lost of what was answered OK. The OpenTelemetry JS gRPC exporter
// (0.301) retries no gRPC status at all (its transport reports every error as final), so the
// retrying client here is grpc-js with gRPC's own retry policy, which honours the server's
// pushback; the Python SDK reads google.rpc.retryinfo-bin, Go's SDK and the Collector the
// RetryInfo in grpc-status-details-bin: both are decoded below with protobufjs.

const RPC = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: 'int32', id: 1 },
                message: { type: 'string', id: 2 },
                details: { rule: 'repeated', type: 'google.protobuf.Any', id: 3 },
              },
            },
            RetryInfo: { fields: { retry_delay: { type: 'google.protobuf.Duration', id: 1 } } },
          },
        },
        protobuf: {
          nested: {
            Any: { fields: { type_url: { type: 'string', id: 1 }, value: { type: 'bytes', id: 2 } } },
            Duration: { fields: { seconds: { type: 'int64', id: 1 }, nanos: { type: 'int32', id: 2 } } },
          },
        },
      },
    },
  },
});

/** The retry delay, in seconds, that each trailer of a refused call gives. */
function retryDelays(error: ServiceError): { details: number; retryInfo: number; pushbackMs: number; code: number } {
  const seconds = (retryInfo: Uint8Array) => {
    const { retry_delay } = RPC.lookupType('google.rpc.RetryInfo').toObject(
      RPC.lookupType('google.rpc.RetryInfo').decode(retryInfo),
      { longs: Number },
    ) as { retry_delay: { seconds: number; nanos?: number } };
    return retry_delay.seconds + (retry_delay.nanos ?? 0) / 1e9;
  };
  const [statusBytes] = error.metadata.get('grpc-status-details-bin') as Buffer[];
  const decoded = RPC.lookupType('google.rpc.Status').decode(statusBytes) as unknown as {
    code: number;
    details: { type_url: string; value: Uint8Array }[];
  };
  assert.equal(decoded.details.length, 1);
  assert.equal(decoded.details[0].type_url, 'type.googleapis.com/google.rpc.RetryInfo');
  const [retryInfo] = error.metadata.get('google.rpc.retryinfo-bin') as Buffer[];
  return {
    code: decoded.code,
    details: seconds(decoded.details[0].value),
    retryInfo: seconds(retryInfo),
    pushbackMs: Number(error.metadata.get('grpc-retry-pushback-ms')[0]),
  };
}

test('a full write queue answers UNAVAILABLE with RetryInfo, and every span answered OK is stored', async (t) => {
  // A queue bound of one byte: whatever arrives while a write waits for its commit is refused.
  const agl = await startAgl(join(await tempDir(t), 'grpc-pressure.duckdb'), { maxQueuedBytes: 1, grpcPort: 0 });
  t.after(() => agl.close());
  const template = await makeBatch(200);
  const clients = Array.from({ length: 16 }, () => exportClient(agl.server.grpcAddress as string, 'traces'));
  const outcomes = await Promise.all(clients.map((client, i) => client.send(freshCopy(template, i + 1))));
  for (const client of clients) client.close();
  const refused = outcomes.flatMap((o) => (o.error ? [o.error] : []));
  const accepted = outcomes.length - refused.length;
  assert.ok(accepted > 0, 'some exports succeed');
  assert.ok(refused.length > 0, 'some exports are refused');
  for (const error of refused) {
    assert.equal(error.code, status.UNAVAILABLE);
    assert.match(error.details, /the store is busy writing; retry in 1 s/);
    assert.deepEqual(retryDelays(error), { code: status.UNAVAILABLE, details: 1, retryInfo: 1, pushbackMs: 1000 });
  }
  const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
  assert.equal(rows[0].n, accepted * template.spanCount);
});

test('an exporter that retries UNAVAILABLE gets every export in, after the delay the server asked for', async (t) => {
  const agl = await startAgl(join(await tempDir(t), 'grpc-retried.duckdb'), { maxQueuedBytes: 1, grpcPort: 0 });
  t.after(() => agl.close());
  const template = await makeBatch(200);
  // Each round of retries lets at least one in (the queue empties between rounds), and a call
  // is tried 5 times: 4 senders all get in.
  const clients = Array.from({ length: 4 }, () =>
    exportClient(agl.server.grpcAddress as string, 'traces', { channel: RETRY_UNAVAILABLE }),
  );
  const outcomes = await Promise.all(clients.map((client, i) => client.send(freshCopy(template, i + 1))));
  for (const client of clients) client.close();
  assert.deepEqual(
    outcomes.map((o) => o.error?.message),
    [undefined, undefined, undefined, undefined],
  );
  assert.ok(
    outcomes.some((o) => o.attempts > 1),
    `some exports were refused and retried: ${outcomes.map((o) => o.attempts)}`,
  );
  const { rows } = await agl.store.query('SELECT count(*) AS n FROM spans');
  assert.equal(rows[0].n, 4 * template.spanCount);
});
