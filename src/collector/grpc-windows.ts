import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { Http2Session, ServerHttp2Stream } from 'node:http2';

/**
 * HTTP/2 flow control starts each connection and each stream with a 64 KiB window: a client
 * sends 64 KiB, then waits until the server's event loop has read them and granted more. While
 * agl ingests, that event loop is busy with decoded batches and commits, and an OTLP/HTTP body
 * never waits on it (the kernel's socket buffers take the body), so over gRPC a 2 MB export
 * waited for some 30 turns of a busy loop. Every connection of the receiver gets WINDOW_BYTES
 * instead, for the connection and each of its streams: what a sender may have in flight unread,
 * far below the message cap.
 *
 * grpc-js makes the HTTP/2 sessions and has no setting for their windows, so the first stream of
 * each session on the receiver's port raises them, seen through node's diagnostics channel. On a
 * node without that channel the windows stay at 64 KiB: slower, nothing else.
 */
const WINDOW_BYTES = 16 * 2 ** 20;

const CHANNEL = 'http2.server.stream.created';

/** Raises the windows of the sessions on local port `port` from now on; returns the undo. */
export function widenWindows(port: number): () => void {
  const widened = new WeakSet<Http2Session>();
  const onStream = (message: unknown) => {
    const session = (message as { stream: ServerHttp2Stream }).stream.session;
    if (session === undefined || widened.has(session) || session.socket?.localPort !== port) return;
    widened.add(session);
    session.setLocalWindowSize(WINDOW_BYTES);
    session.settings({ initialWindowSize: WINDOW_BYTES });
  };
  subscribe(CHANNEL, onStream);
  return () => unsubscribe(CHANNEL, onStream);
}
