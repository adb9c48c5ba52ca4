import {
  status,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { ProtobufReader } from '../otlp/protobuf-reader.js';
import { LEN, tag, VARINT } from '../otlp/protobuf-wire.js';

/**
 * The standard gRPC health service (grpc.health.v1.Health, github.com/grpc/grpc-proto
 * grpc/health/v1/health.proto): what Kubernetes' gRPC probes, grpc_health_probe and load
 * balancers ask. agl is SERVING once its store is open and NOT_SERVING while it opens or stops.
 */

/** grpc.health.v1.HealthCheckRequest and HealthCheckResponse field numbers. */
const HealthCheckRequest = { service: 1 } as const;
const HealthCheckResponse = { status: 1 } as const;
/** HealthCheckResponse.ServingStatus */
const ServingStatus = { SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;

/**
 * A request: the service it asks about ('' for the server as a whole), null for bytes that are
 * not a HealthCheckRequest. An object, as grpc-js takes a falsy request for a missing one.
 */
interface HealthRequest {
  readonly service: string | null;
}

function requestOf(bytes: Buffer): HealthRequest {
  try {
    const reader = new ProtobufReader(bytes);
    let service = '';
    while (!reader.done) {
      const fieldTag = reader.tag();
      if (fieldTag === tag(HealthCheckRequest.service, LEN)) service = reader.string();
      else reader.skipField(fieldTag);
    }
    return { service };
  } catch {
    return { service: null };
  }
}

const response = (servingStatus: number): Buffer =>
  Buffer.from([tag(HealthCheckResponse.status, VARINT), servingStatus]);

const method = (name: string, responseStream: boolean) => ({
  path: `/grpc.health.v1.Health/${name}`,
  requestStream: false,
  responseStream,
  requestSerialize: (value: Buffer) => value,
  requestDeserialize: requestOf,
  responseSerialize: (value: Buffer) => value,
  responseDeserialize: (value: Buffer) => value,
});

export const HEALTH_SERVICE_NAME = 'grpc.health.v1.Health';

export class HealthService {
  readonly definition: ServiceDefinition = { Check: method('Check', false), Watch: method('Watch', true) };
  readonly implementation: UntypedServiceImplementation = {
    Check: (call: ServerUnaryCall<HealthRequest, Buffer>, callback: sendUnaryData<Buffer>) => {
      const { service } = call.request;
      if (service === null) callback({ code: status.INVALID_ARGUMENT, details: 'not a HealthCheckRequest' });
      else if (!this.services.has(service))
        callback({ code: status.NOT_FOUND, details: `agl serves no service "${service}"` });
      else callback(null, response(this.current(service)));
    },
    Watch: (call: ServerWritableStream<HealthRequest, Buffer>) => {
      if (call.request.service === null) {
        call.emit('error', { code: status.INVALID_ARGUMENT, details: 'not a HealthCheckRequest' });
        return;
      }
      this.watchers.add(call);
      call.once('cancelled', () => this.watchers.delete(call));
      call.write(response(this.current(call.request.service)));
    },
  };
  private serving = false;
  private readonly services: ReadonlySet<string>;
  private readonly watchers = new Set<ServerWritableStream<HealthRequest, Buffer>>();

  /** `services`: the full names of the services that share the server's health. */
  constructor(services: readonly string[]) {
    this.services = new Set(['', ...services]);
  }

  private current(service: string): number {
    if (!this.services.has(service)) return ServingStatus.SERVICE_UNKNOWN;
    return this.serving ? ServingStatus.SERVING : ServingStatus.NOT_SERVING;
  }

  /** Serving or not; each Watch hears of the change. */
  set(serving: boolean): void {
    if (serving === this.serving) return;
    this.serving = serving;
    for (const call of this.watchers) call.write(response(this.current(call.request.service ?? '')));
  }

  /** NOT_SERVING, and every Watch ended, so that a graceful shutdown does not wait for them. */
  close(): void {
    this.set(false);
    for (const call of this.watchers) call.end();
    this.watchers.clear();
  }
}
