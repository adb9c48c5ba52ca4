/**
 * Remembers which spans the store holds, so that a span delivered twice (an exporter retrying
 * after a timeout) is stored once. A span's identity is (trace_id, span_id, rollout_id,
 * attempt_id).
 *
 * Memory stays small: one 52-bit hash per stored span in a Set (about 30 bytes each), plus the
 * exact keys of writes not yet committed. A hash hit is only a suspicion; `confirm` settles it
 * against the exact keys in the database, which costs a query only for real re-deliveries.
 */
export class SpanKeyIndex {
  private readonly hashes = new Set<number>();
  private readonly pending = new Set<string>();

  /** Registers a span that is in the database already (used when opening a store). */
  addStored(key: string): void {
    this.hashes.add(hashKey(key));
  }

  /**
   * Classifies a span about to be written: 'new' registers it as pending, 'duplicate' means an
   * identical span is pending, 'suspect' means it may be stored already and must be confirmed.
   */
  classify(key: string): 'new' | 'duplicate' | 'suspect' {
    if (this.pending.has(key)) return 'duplicate';
    const h = hashKey(key);
    if (this.hashes.has(h)) return 'suspect';
    this.hashes.add(h);
    this.pending.add(key);
    return 'new';
  }

  /** A suspect that the database does not hold after all: register it as pending. */
  addPending(key: string): void {
    this.hashes.add(hashKey(key));
    this.pending.add(key);
  }

  /** The write holding these keys committed: the hashes alone remember them now. */
  committed(keys: readonly string[]): void {
    for (const key of keys) this.pending.delete(key);
  }

  /** The write holding these keys failed: forget them, so a retry is not taken for a duplicate. */
  failed(keys: readonly string[]): void {
    for (const key of keys) {
      this.pending.delete(key);
      this.hashes.delete(hashKey(key));
    }
  }

  get size(): number {
    return this.hashes.size;
  }
}

export function spanKey(traceId: string, spanId: string, rolloutId: string | null, attemptId: string | null): string {
  return `${traceId}/${spanId}/${rolloutId ?? ''}/${attemptId ?? ''}`;
}

/** Two 32-bit FNV-1a variants folded into 52 bits: a collision costs one query, never a span. */
function hashKey(key: string): number {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ key.length;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  return (a >>> 0) * 0x100000 + ((b >>> 0) & 0xfffff);
}
