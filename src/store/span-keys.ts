/**
 * Remembers which spans the store holds, so that a span delivered twice (an exporter retrying
 * after a timeout) is stored once. A span's identity is (trace_id, span_id, rollout_id,
 * attempt_id).
 *
 * Memory and time stay small: one 52-bit hash of (trace_id, span_id) per stored span. A hit is
 * only a suspicion: the caller
 * settles it against exact keys (in writes not yet committed, then in the database), which
 * costs work only for real re-deliveries.
 */
export class SpanKeyIndex {
  private readonly hashes = new Set<number>();

  /** Registers a span; false when the index has seen its hash before (a suspected duplicate). */
  add(traceId: string, spanId: string): boolean {
    const h = spanHash(traceId, spanId);
    if (this.hashes.has(h)) return false;
    this.hashes.add(h);
    return true;
  }

  /** Forgets spans whose write failed, so that their retry is not taken for a duplicate. */
  remove(traceId: string, spanId: string): void {
    this.hashes.delete(spanHash(traceId, spanId));
  }
}

export function spanKey(traceId: string, spanId: string, rolloutId: string | null, attemptId: string | null): string {
  return `${traceId}/${spanId}/${rolloutId ?? ''}/${attemptId ?? ''}`;
}

/** Two 32-bit FNV-1a variants over both ids, folded into 52 bits. */
function spanHash(traceId: string, spanId: string): number {
  let a = 0x811c9dc5;
  let b = 0x01000193;
  for (let i = 0; i < traceId.length; i++) {
    const c = traceId.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  for (let i = 0; i < spanId.length; i++) {
    const c = spanId.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  b ^= b >>> 15;
  return (a >>> 0) * 0x100000 + ((b >>> 0) & 0xfffff);
}
