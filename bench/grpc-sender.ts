import { connect, type ClientHttp2Session, type IncomingHttpHeaders } from 'node:http2';

/**
 * A gRPC client of one unary method, written on node:http2 directly: a message frame out, the
 * status back. The ingest benchmark's senders use it as its HTTP senders use undici, so that
 * the figures are the server's: grpc-js's own client took about four times undici's CPU per
 * request (2.3 MB exports: 7.7 against 2.0 ms), and on the benchmark's machine a sender's CPU is
 * taken from the server. Real exporters (Python's and Go's gRPC, the Collector) run elsewhere.
 */
export class Http2GrpcSender {
  private readonly session: ClientHttp2Session;

  constructor(address: string) {
    this.session = connect(`http://${address}`);
  }

  /** One call of `path` with `message`: its grpc-status (0 = OK) and grpc-message. */
  send(path: string, message: Buffer): Promise<{ status: number; message: string }> {
    return new Promise((resolve, reject) => {
      const stream = this.session.request({
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/grpc',
        te: 'trailers',
      });
      let seen: IncomingHttpHeaders = {};
      // The status is in the trailers, or in the headers of a trailers-only answer.
      const settle = (fields: IncomingHttpHeaders) => {
        seen = { ...seen, ...fields };
        if (seen['grpc-status'] !== undefined)
          resolve({ status: Number(seen['grpc-status']), message: decodeURI(String(seen['grpc-message'] ?? '')) });
      };
      stream.on('response', settle);
      stream.on('trailers', settle);
      stream.once('error', reject);
      stream.resume();
      const prefix = Buffer.allocUnsafe(5);
      prefix[0] = 0;
      prefix.writeUInt32BE(message.length, 1);
      stream.write(prefix);
      stream.end(message);
    });
  }

  close(): void {
    this.session.close();
  }
}
