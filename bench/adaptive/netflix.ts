/**
 * Faithful ports of two of Netflix's concurrency-limits algorithms, for the benchmark only:
 * each line of `update` cites the Java it ports (Netflix/concurrency-limits at 78a74b9,
 * concurrency-limits-core/src/main/java/com/netflix/concurrency/limits/limit/). Defaults are
 * Netflix's, except `minLimit`/`maxConcurrency`, which take the gate's [min, contract] so every
 * contender runs inside the same bounds. RTTs are in ms here, nanoseconds there: both formulas
 * use only ratios of RTTs, so the unit does not matter.
 */
import type { LimitAlgorithm, LimitBounds, LimitSample } from '../../src/adaptive/algorithm.js';

/** ExpAvgMeasurement.java: a mean over the first `warmup` samples, then an EMA of `window`. */
class ExpAvgMeasurement {
  value = 0;
  #sum = 0;
  #count = 0;
  constructor(
    readonly window: number,
    readonly warmup: number,
  ) {}
  add(sample: number): number {
    if (this.#count < this.warmup) {
      this.#count++; // L36-39
      this.#sum += sample;
      this.value = this.#sum / this.#count;
    } else {
      const factor = 2 / (this.window + 1); // L41, L47-49
      this.value = this.value * (1 - factor) + sample * factor; // L42
    }
    return this.value;
  }
}

/** Gradient2Limit.java; defaults from its Builder (L75-83): smoothing 0.2, queueSize 4, tolerance 1.5, longWindow 600. */
export class Gradient2Port implements LimitAlgorithm {
  readonly name = 'netflix-gradient2';
  readonly minRttMs = undefined;
  #estimated: number;
  readonly #longRtt = new ExpAvgMeasurement(600, 10); // L270
  readonly #bounds: LimitBounds;

  constructor(bounds: LimitBounds) {
    this.#bounds = bounds;
    this.#estimated = bounds.initial; // L263
  }

  get limit(): number {
    return Math.floor(this.#estimated);
  }

  update(s: LimitSample): number {
    // didDrop is accepted and never read (L278-323): the flaw hostgate's gradient fixes.
    const estimated = this.#estimated; // L279
    const queueSize = 4; // L280, Builder L80
    const shortRtt = s.rttMs; // L283
    const longRtt = this.#longRtt.add(s.rttMs); // L284
    if (longRtt / shortRtt > 2) this.#longRtt.value = this.#longRtt.value * 0.95; // L293-295
    if (s.inflight < estimated / 2) return Math.floor(estimated); // L298-300
    const gradient = Math.max(0.5, Math.min(1.0, (1.5 * longRtt) / shortRtt)); // L306
    let newLimit = estimated * gradient + queueSize; // L307
    newLimit = estimated * (1 - 0.2) + newLimit * 0.2; // L308
    newLimit = Math.max(this.#bounds.min, Math.min(this.#bounds.max, newLimit)); // L309
    this.#estimated = newLimit; // L320
    return Math.floor(newLimit); // L322
  }
}

/** Log10RootIntFunction.java L15-19, L34-36: max(1, floor(log10(limit))). */
function log10(limit: number): number {
  return Math.max(1, Math.floor(Math.log10(Math.max(1, limit))));
}

/** VegasLimit.java; defaults from its Builder (L48-58): smoothing 1.0, probeMultiplier 30. */
export class VegasPort implements LimitAlgorithm {
  readonly name = 'netflix-vegas';
  #estimated: number;
  #rttNoLoad = 0;
  #probeCount = 0;
  #probeJitter = 0;
  readonly #bounds: LimitBounds;
  readonly #random: () => number;

  /** `random` replaces ThreadLocalRandom (L241), seeded so runs repeat. */
  constructor(bounds: LimitBounds, random: () => number) {
    this.#bounds = bounds;
    this.#random = random;
    this.#estimated = bounds.initial; // L225
    this.#resetProbeJitter(); // L235
  }

  get limit(): number {
    return Math.floor(this.#estimated);
  }
  get minRttMs(): number | undefined {
    return this.#rttNoLoad || undefined;
  }

  #resetProbeJitter(): void {
    this.#probeJitter = 0.5 + this.#random() * 0.5; // L240-242
  }

  update(s: LimitSample): number {
    const rtt = Math.max(1e-6, s.rttMs); // L250-252: rtt must be > 0
    this.#probeCount++; // L254
    if (this.#probeJitter * 30 * this.#estimated <= this.#probeCount) {
      // L244-246, L255-263: "probe": take this (possibly loaded) RTT as the new no-load RTT
      this.#resetProbeJitter();
      this.#probeCount = 0;
      this.#rttNoLoad = rtt;
      return Math.floor(this.#estimated);
    }
    if (this.#rttNoLoad === 0 || rtt < this.#rttNoLoad) {
      this.#rttNoLoad = rtt; // L265-272
      return Math.floor(this.#estimated);
    }
    const estimated = this.#estimated; // L280
    const queueSize = Math.ceil(estimated * (1 - this.#rttNoLoad / rtt)); // L281
    const l = log10(Math.floor(estimated));
    let newLimit: number;
    if (s.dropped) {
      newLimit = estimated - l; // L285-286, decreaseFunc L57
    } else if (s.inflight * 2 < estimated) {
      return Math.floor(estimated); // L288-289
    } else {
      const alpha = 3 * l; // L291, alphaFunc L53
      const beta = 6 * l; // L292, betaFunc L54
      const threshold = l; // L293, thresholdFunc L55
      if (queueSize <= threshold)
        newLimit = estimated + beta; // L296-297
      else if (queueSize < alpha)
        newLimit = estimated + l; // L299-300, increaseFunc L56
      else if (queueSize > beta)
        newLimit = estimated - l; // L302-303
      else return Math.floor(estimated); // L305-306
    }
    // L310 clamps to [1, maxLimit]; the gate's min replaces 1.
    newLimit = Math.max(this.#bounds.min, Math.min(this.#bounds.max, newLimit));
    newLimit = (1 - 1.0) * estimated + 1.0 * newLimit; // L311, smoothing 1.0
    this.#estimated = newLimit; // L319
    return Math.floor(newLimit); // L320
  }
}
