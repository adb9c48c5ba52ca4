/**
 * Seeded randomness for algorithms: the same seed gives the same choices, and a generator's whole
 * state is one number, so a search can save it in the store and resume where it stopped.
 */

/** mulberry32: a small, fast 32-bit generator, good enough for sampling (not for secrets). */
export class Random {
  constructor(private value: number) {
    this.value = value >>> 0;
  }

  /** The state to save; `new Random(state)` continues the same sequence. */
  get state(): number {
    return this.value;
  }

  /** A float in [0, 1). */
  next(): number {
    this.value = (this.value + 0x6d2b79f5) >>> 0;
    let t = this.value;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** A whole number in [0, n). */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** A whole number in [0, 2^31), e.g. a model request's `seed`. */
  int(): number {
    return Math.floor(this.next() * 2 ** 31);
  }

  /** `count` distinct indices out of [0, n), in random order. */
  sample(n: number, count: number): number[] {
    return this.shuffle(Array.from({ length: n }, (_, i) => i)).slice(0, count);
  }

  /** Shuffles `items` in place (Fisher-Yates) and returns it. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }
}

/** A seed for one named stream of randomness: streams of one seed do not move each other. */
export function streamSeed(seed: number, ...labels: (string | number)[]): number {
  let hash = 0x811c9dc5 ^ (seed >>> 0);
  for (const ch of labels.join('\u0000')) hash = Math.imul(hash ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return hash >>> 0;
}

/** Where a batch sampler stands: its epoch (one pass over the data) and its place in that pass. */
export interface BatchPosition {
  epoch: number;
  index: number;
}

/**
 * Batches of indices into `count` items: each epoch a fresh seeded shuffle, every item once per
 * epoch, a batch running on into the next epoch when the pass ends. A batch never holds an item
 * twice (it is at most `count` long).
 */
export class Batches {
  private order: number[];

  constructor(
    private readonly count: number,
    private readonly seed: number,
    private readonly label: string,
    private at: BatchPosition = { epoch: 0, index: 0 },
  ) {
    this.order = this.shuffled(this.at.epoch);
  }

  get position(): BatchPosition {
    return { ...this.at };
  }

  next(size: number): number[] {
    const batch: number[] = [];
    const wanted = Math.min(size, this.count);
    while (batch.length < wanted) {
      if (this.at.index >= this.count) {
        this.at = { epoch: this.at.epoch + 1, index: 0 };
        this.order = this.shuffled(this.at.epoch);
      }
      const item = this.order[this.at.index++];
      if (!batch.includes(item)) batch.push(item);
    }
    return batch;
  }

  private shuffled(epoch: number): number[] {
    return new Random(streamSeed(this.seed, this.label, epoch)).shuffle(
      Array.from({ length: this.count }, (_, i) => i),
    );
  }
}
