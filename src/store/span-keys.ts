/**
 * Remembers which spans the store holds, so that a span delivered twice (an exporter retrying
 * after a timeout) is stored once. A span's identity is (trace_id, span_id, rollout_id,
 * attempt_id).
 *
 * Memory and time stay small: one 52-bit hash of (trace_id, span_id) per stored span, in an
 * open-addressing table of doubles (16 bytes a span at most, outside the JS heap: a Set of the
 * same numbers took 50 MB of heap for 1,000,000 spans, all of it scanned by the GC). A hit is
 * only a suspicion: the caller settles it against exact keys (in writes not yet committed, then
 * in the database), which costs work only for real re-deliveries.
 */
export class SpanKeyIndex {
  /** Hashes by linear probing; 0 is an empty slot (a hash of 0 is stored as 1). */
  private slots = new Float64Array(1 << 16);
  private count = 0;

  /** Registers a span; false when the index has seen its hash before (a suspected duplicate). */
  add(traceId: string, spanId: string): boolean {
    const h = spanHash(traceId, spanId) || 1;
    const mask = this.slots.length - 1;
    let i = slotOf(h, mask);
    for (; this.slots[i] !== 0; i = (i + 1) & mask) if (this.slots[i] === h) return false;
    this.slots[i] = h;
    if (++this.count * 2 > this.slots.length) this.grow();
    return true;
  }

  /** Forgets spans whose write failed, so that their retry is not taken for a duplicate. */
  remove(traceId: string, spanId: string): void {
    const h = spanHash(traceId, spanId) || 1;
    const slots = this.slots;
    const mask = slots.length - 1;
    let i = slotOf(h, mask);
    for (; slots[i] !== h; i = (i + 1) & mask) if (slots[i] === 0) return;
    // Backward-shift deletion: later entries of the probe run move up, so no lookup stops early.
    slots[i] = 0;
    this.count--;
    for (let j = (i + 1) & mask; slots[j] !== 0; j = (j + 1) & mask) {
      const home = slotOf(slots[j], mask);
      // The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
      if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
        slots[i] = slots[j];
        slots[j] = 0;
        i = j;
      }
    }
  }

  private grow(): void {
    const old = this.slots;
    this.slots = new Float64Array(old.length * 2);
    const mask = this.slots.length - 1;
    for (const h of old) {
      if (h === 0) continue;
      let i = slotOf(h, mask);
      while (this.slots[i] !== 0) i = (i + 1) & mask;
      this.slots[i] = h;
    }
  }
}

/** A hash's home slot (its low bits; the hash is already well mixed). */
const slotOf = (h: number, mask: number) => (h % 0x100000000) & mask;

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
