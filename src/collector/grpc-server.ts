import { createServer, type AddressInfo, type Server as NetServer } from 'node:net';
import {
  Metadata,
  Server,
  ServerCredentials,
  ServerInterceptingCall,
  status,
  type sendUnaryData,
  type ServerInterceptor,
  type ServerUnaryCall,
} from '@grpc/grpc-js';
import { StoreBusyError, StoreUnavailableError } from '../api/errors.js';
import type { BatchSink } from '../otlp/batch.js';
import { isDecodeError, type Signal } from '../otlp/decode.js';
import { exportResponse } from '../otlp/responses.js';
import { hostName, isLoopbackHost } from './browser-guard.js';
import type { DecodePool } from './decode-pool.js';
import { HEALTH_SERVICE_NAME, HealthService } from './grpc-health.js';
import { EXPORT_PATHS, OTLP_SERVICES, retryLater, type GrpcStatus } from './grpc-messages.js';
import { widenWindows } from './grpc-windows.js';
import { bearerCheck } from './http.js';
import { ingestOtlp, REQUEST_MESSAGE } from './otlp-ingest.js';

/** The port of OTLP/gRPC. */
export const DEFAULT_GRPC_PORT = 4317;

interface GrpcReceiverOptions {
  /** The address to listen on; on a loopback one, only loopback names are answered, as over HTTP. */
  readonly host: string;
  /** 0 for any free port. */
  readonly port: number;
  /** When set, every call but the health service's needs the metadata `authorization: Bearer <token>`. */
  readonly token?: string;
  /** The largest Export message, after decompression. */
  readonly maxMessageBytes: number;
}

/** Where exports go once the store is open. */
interface IngestTarget {
  readonly sink: BatchSink;
  readonly decoder: DecodePool;
}

/** How long close() lets calls in flight finish before it cuts their connections. */
const CLOSE_GRACE_MS = 5_000;

/**
 * OTLP/gRPC: TraceService/Export and LogsService/Export, and the grpc.health.v1 service, on a
 * port of their own. agl owns the listening socket (bound like the HTTP port, before the store
 * opens, with node's own errors for a port in use); grpc-js speaks HTTP/2 and gRPC on the
 * connections it is handed. After the transport, an export takes OTLP/HTTP's path (ingestOtlp):
 * the same decoder, write queue and group commit, answered once durable.
 *
 * grpc-js reads the message before the handler runs, holding at most `maxMessageBytes`: a larger
 * message, compressed or not, and a gzip that inflates past it, are RESOURCE_EXHAUSTED without
 * more memory (it inflates as a stream and stops at the cap). What can be refused without the
 * message is refused first, from the call's metadata (admission).
 */
export class GrpcReceiver {
  private target: IngestTarget | undefined;
  private readonly health = new HealthService(Object.values(OTLP_SERVICES).map((service) => service.name));
  private readonly grpc: Server;
  private readonly listener: NetServer;
  private stopWidening = () => {};

  private constructor(options: GrpcReceiverOptions) {
    this.grpc = new Server({
      'grpc.max_receive_message_length': options.maxMessageBytes,
      interceptors: [admission(options, () => this.target)],
    });
    for (const signal of ['traces', 'logs'] as const)
      this.grpc.addService(OTLP_SERVICES[signal].definition, { Export: this.exportHandler(signal) });
    this.grpc.addService(this.health.definition, this.health.implementation);
    const injector = this.grpc.createConnectionInjector(ServerCredentials.createInsecure());
    this.listener = createServer({ noDelay: true }, (socket) => injector.injectConnection(socket));
  }

  /** Listens on host:port; exports get UNAVAILABLE (retry) and health NOT_SERVING until `serve`. */
  static async listen(options: GrpcReceiverOptions): Promise<GrpcReceiver> {
    const receiver = new GrpcReceiver(options);
    await new Promise<void>((resolve, reject) => {
      receiver.listener.once('error', reject);
      receiver.listener.listen(options.port, options.host, () => {
        receiver.listener.off('error', reject);
        resolve();
      });
    });
    const { port } = receiver.listener.address() as AddressInfo;
    receiver.stopWidening = widenWindows(port);
    return receiver;
  }

  /** host:port, as a gRPC client's target. */
  get address(): string {
    const { address, family, port } = this.listener.address() as AddressInfo;
    return family === 'IPv6' ? `[${address}]:${port}` : `${address}:${port}`;
  }

  /** From now on exports are written to `sink`, decoded by `decoder`. */
  serve(sink: BatchSink, decoder: DecodePool): void {
    this.target = { sink, decoder };
    this.health.set(true);
  }

  /** Stops accepting connections and waits for the calls in flight (cut after a grace). */
  async close(): Promise<void> {
    this.health.close();
    const closed = new Promise<void>((resolve) => this.listener.close(() => resolve()));
    const cut = setTimeout(() => this.grpc.forceShutdown(), CLOSE_GRACE_MS).unref();
    await new Promise<void>((resolve) => this.grpc.tryShutdown(() => resolve()));
    clearTimeout(cut);
    await closed;
    this.stopWidening();
  }

  private exportHandler(signal: Signal) {
    return (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>): void => {
      // Admission let the call in, so the store is open.
      const target = this.target as IngestTarget;
      const request = call.request;
      ingestOtlp(signal, 'protobuf', request, target.sink, target.decoder, isWholeFrame(request)).then(
        ({ rejected, message }) => callback(null, exportResponse('protobuf', signal, rejected, message).body),
        (error: unknown) => callback(exportError(signal, error)),
      );
    };
  }
}

/** gRPC's message prefix: a compressed flag and a 4-byte length. */
const FRAME_PREFIX_BYTES = 5;

/**
 * Whether grpc-js handed the message as a view past the prefix of a buffer of its own (it joins
 * a message's frames into one, past 4 KiB never from node's shared pool): then nothing else uses
 * that buffer and it moves to a decode thread without a copy (for 2.3 MB exports, that copy and
 * its fresh allocation were the main thread's largest cost over OTLP/HTTP's). Any other shape
 * is copied.
 */
const isWholeFrame = (message: Buffer): boolean =>
  message.byteOffset === FRAME_PREFIX_BYTES && message.buffer.byteLength === message.length + FRAME_PREFIX_BYTES;

/**
 * OTLP's gRPC semantics for what an export can run into: INVALID_ARGUMENT for bad data (not
 * retried); UNAVAILABLE with RetryInfo while the write queue is full or the store cannot write
 * (retried after the delay); INTERNAL for agl's own faults.
 */
function exportError(signal: Signal, error: unknown): GrpcStatus {
  if (isDecodeError(error)) {
    return {
      code: status.INVALID_ARGUMENT,
      details: `the message is not a valid ${REQUEST_MESSAGE[signal]}: ${error.message}`,
    };
  }
  if (error instanceof StoreBusyError)
    return retryLater(`the store is busy writing; retry in ${error.retryAfterSeconds} s`, error.retryAfterSeconds);
  if (error instanceof StoreUnavailableError) return retryLater(error.message, error.retryAfterSeconds);
  console.error('agl: OTLP/gRPC export failed:', error);
  return { code: status.INTERNAL, details: `internal error: ${(error as Error)?.message ?? String(error)}` };
}

const HEALTH_PATHS = `/${HEALTH_SERVICE_NAME}/`;

/**
 * Refuses, from a call's metadata and before its message is read, what the HTTP server refuses
 * before reading a body: a non-loopback :authority on a loopback address (PERMISSION_DENIED), a
 * missing or wrong token (UNAUTHENTICATED; the health service needs none, since Kubernetes'
 * gRPC probes send no metadata and it tells nothing), and an export while the store is not open
 * or its write queue is full (UNAVAILABLE with RetryInfo).
 */
function admission(options: GrpcReceiverOptions, target: () => IngestTarget | undefined): ServerInterceptor {
  const checkHost = isLoopbackHost(options.host);
  const authorized = options.token ? bearerCheck(options.token) : () => true;
  const refusal = (path: string, metadata: Metadata, authority: string | undefined): GrpcStatus | undefined => {
    if (checkHost && authority && !isLoopbackHost(hostName(authority))) {
      return {
        code: status.PERMISSION_DENIED,
        details: `this agl server listens on a loopback address and answers only to loopback names, not to "${authority}"`,
      };
    }
    if (path.startsWith(HEALTH_PATHS)) return undefined;
    const [header] = metadata.get('authorization');
    if (!authorized(typeof header === 'string' ? header : undefined)) {
      return {
        code: status.UNAUTHENTICATED,
        details: 'this agl server needs the metadata authorization: Bearer <token> (agl --token or AGL_TOKEN)',
      };
    }
    if (!EXPORT_PATHS.has(path)) return undefined;
    const ingest = target();
    if (ingest === undefined) return retryLater('agl is opening its database; retry in a moment', 1);
    if (ingest.sink.busy) return retryLater('the store is busy writing; retry in 1 s', 1);
    return undefined;
  };
  return (method, call) =>
    new ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, pass) => {
            const refused = refusal(method.path, metadata, call.getHost());
            if (refused === undefined) pass(metadata);
            else call.sendStatus({ ...refused, metadata: refused.metadata ?? new Metadata() });
          },
        }),
    });
}
