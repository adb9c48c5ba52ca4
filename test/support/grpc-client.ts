import {
  credentials,
  makeGenericClientConstructor,
  Metadata,
  type ChannelOptions,
  type ServiceError,
} from '@grpc/grpc-js';

import { OTLP_SERVICES } from '../../src/collector/grpc-messages.js';
import type { Signal } from '../../src/otlp/decode.js';

type ServiceClient = InstanceType<ReturnType<typeof makeGenericClientConstructor>>;

// A plain grpc-js client of agl's OTLP/gRPC services that sends any bytes as the Export
// message (the official exporters send only what their SDK serialises), and reads back the
// status and trailers.

export interface ExportOutcome {
  /** The response message (ExportTraceServiceResponse bytes) on OK. */
  readonly response?: Buffer;
  /** The error status, with its trailers in `metadata`. */
  readonly error?: ServiceError;
  /** The calls it took, with a retry policy (grpc-js reports the attempts before the one answered). */
  readonly attempts: number;
}

export interface ExportClientOptions {
  /** Metadata sent with every call (authorization). */
  readonly metadata?: Record<string, string>;
  /** grpc-js channel options (compression, authority, retry policy, message size). */
  readonly channel?: Partial<ChannelOptions>;
}

/** A client of one signal's Export at `address` (host:port); close it with `close()`. */
export function exportClient(address: string, signal: Signal, options: ExportClientOptions = {}) {
  const Client = makeGenericClientConstructor(OTLP_SERVICES[signal].definition, OTLP_SERVICES[signal].name);
  const client = new Client(address, credentials.createInsecure(), {
    // Every client its own connection, as separate apps have.
    'grpc.use_local_subchannel_pool': 1,
    'grpc.max_send_message_length': -1,
    ...options.channel,
  }) as ServiceClient;
  const metadata = new Metadata();
  for (const [key, value] of Object.entries(options.metadata ?? {})) metadata.set(key, value);
  return {
    send: (body: Buffer): Promise<ExportOutcome> =>
      new Promise((resolve) => {
        let attempts = 1;
        const call = client.Export(body, metadata, (error: ServiceError | null, response: Buffer) => {
          const previous = (error?.metadata ?? new Metadata()).get('grpc-previous-rpc-attempts')[0];
          if (previous !== undefined) attempts = Number(previous) + 1;
          resolve(error ? { error, attempts } : { response, attempts });
        });
        call.on('metadata', (received: Metadata) => {
          const previous = received.get('grpc-previous-rpc-attempts')[0];
          if (previous !== undefined) attempts = Number(previous) + 1;
        });
      }),
    close: () => client.close(),
  };
}

/** Sends one Export on a client of its own. */
export async function exportOnce(
  address: string,
  signal: Signal,
  body: Buffer,
  options: ExportClientOptions = {},
): Promise<ExportOutcome> {
  const client = exportClient(address, signal, options);
  try {
    return await client.send(body);
  } finally {
    client.close();
  }
}

/** A gRPC retry policy (gRPC's A6) for UNAVAILABLE, as exporters that retry have one. */
export const RETRY_UNAVAILABLE: Partial<ChannelOptions> = {
  'grpc.service_config': JSON.stringify({
    methodConfig: [
      {
        name: Object.values(OTLP_SERVICES).map(({ name }) => ({ service: name })),
        retryPolicy: {
          maxAttempts: 5,
          initialBackoff: '0.1s',
          maxBackoff: '2s',
          backoffMultiplier: 2,
          retryableStatusCodes: ['UNAVAILABLE'],
        },
      },
    ],
  }),
};

const healthMethod = (name: string, responseStream: boolean) => ({
  path: `/grpc.health.v1.Health/${name}`,
  requestStream: false,
  responseStream,
  requestSerialize: (value: Buffer) => value,
  requestDeserialize: (value: Buffer) => value,
  responseSerialize: (value: Buffer) => value,
  responseDeserialize: (value: Buffer) => value,
});

const HEALTH = makeGenericClientConstructor(
  { Check: healthMethod('Check', false), Watch: healthMethod('Watch', true) },
  'grpc.health.v1.Health',
);

/** grpc.health.v1.Health/Watch of the server as a whole: each ServingStatus as it comes, until the server ends the stream. */
export function healthWatch(address: string, onStatus: (status: number) => void): Promise<void> {
  const client = new HEALTH(address, credentials.createInsecure()) as ServiceClient;
  const stream = client.Watch(Buffer.alloc(0));
  stream.on('data', (response: Buffer) => onStatus(response.length === 0 ? 0 : response[1]));
  return new Promise((resolve, reject) => {
    stream.once('end', () => {
      client.close();
      resolve();
    });
    stream.once('error', reject);
  });
}

/** grpc.health.v1.Health/Check: the ServingStatus number, or the error. */
export function healthCheck(address: string, service = ''): Promise<{ status?: number; error?: ServiceError }> {
  const client = new HEALTH(address, credentials.createInsecure()) as ServiceClient;
  // HealthCheckRequest { string service = 1; }
  const request = Buffer.concat([Buffer.from([0x0a, Buffer.byteLength(service)]), Buffer.from(service)]);
  return new Promise((resolve) => {
    client.Check(request, (error: ServiceError | null, response: Buffer) => {
      client.close();
      // HealthCheckResponse { ServingStatus status = 1; }: [0x08, status], or empty for 0.
      resolve(error ? { error } : { status: response.length === 0 ? 0 : response[1] });
    });
  });
}
