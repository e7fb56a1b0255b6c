/**
 * A fixed-size log-linear histogram of durations in ms: four buckets per power of two of
 * microseconds (≤ 19% relative error), so quantiles cost no allocation and no sorting.
 */

const SUB_BUCKETS = 4;
const BUCKETS = 1 + SUB_BUCKETS * 42; // up to 2^42 µs ≈ 50 days

export interface DurationSummary {
  count: number;
  /** Sum of all recorded durations, ms. */
  sumMs: number;
  maxMs: number;
  /** Upper bound of the bucket holding the median, ms (0 when every sample was 0). */
  p50Ms: number;
  p99Ms: number;
}

export class DurationHistogram {
  /** Allocated at the first sample above zero: a short-lived gate (per request) may never need it. */
  #buckets: Float64Array | undefined = undefined;
  #zeros = 0;
  #count = 0;
  #sum = 0;
  #max = 0;

  record(ms: number): void {
    this.#count++;
    if (!(ms > 0)) {
      this.#zeros++;
      return;
    }
    this.#sum += ms;
    if (ms > this.#max) this.#max = ms;
    const us = ms * 1000;
    const index = us < 1 ? 0 : Math.min(BUCKETS - 1, 1 + Math.floor(Math.log2(us) * SUB_BUCKETS));
    if (this.#buckets === undefined) this.#buckets = new Float64Array(BUCKETS);
    this.#buckets[index]!++;
  }

  get count(): number {
    return this.#count;
  }

  /** Upper bound (ms) of the bucket that holds quantile `q` (0..1). */
  quantile(q: number): number {
    if (this.#count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.#count));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.#bucket(i);
      if (seen >= rank) return i === 0 ? 0 : Math.min(this.#max, 2 ** (i / SUB_BUCKETS) / 1000);
    }
    return this.#max;
  }

  /** Cumulative counts at the given upper bounds (ms), for exporting as a Prometheus histogram. */
  cumulative(boundsMs: readonly number[]): number[] {
    const out: number[] = [];
    let seen = 0;
    let i = 0;
    for (const bound of boundsMs) {
      for (; i < BUCKETS; i++) {
        const upper = i === 0 ? 0.001 : 2 ** (i / SUB_BUCKETS) / 1000;
        if (upper > bound) break;
        seen += this.#bucket(i);
      }
      out.push(seen);
    }
    return out;
  }

  /** Samples in bucket `i`; bucket 0 also holds the samples of exactly 0. */
  #bucket(i: number): number {
    const counted = this.#buckets === undefined ? 0 : this.#buckets[i]!;
    return i === 0 ? counted + this.#zeros : counted;
  }

  summary(): DurationSummary {
    return {
      count: this.#count,
      sumMs: this.#sum,
      maxMs: this.#max,
      p50Ms: this.quantile(0.5),
      p99Ms: this.quantile(0.99),
    };
  }
}
