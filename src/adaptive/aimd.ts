import {
  clampLimit,
  type LimitAlgorithm,
  type LimitBounds,
  type LimitSample,
} from './algorithm.js';
import { CutPacer, DropLevel, Ewma, MinRtt, RttProbe } from './rtt.js';

export interface AimdOptions extends LimitBounds {
  /** Multiplier on a drop (default 0.9, Netflix's AIMDLimit `backoffRatio`). */
  backoff?: number;
  /** Growth only while the smoothed RTT is within `tolerance` × min RTT (default 1.2). */
  tolerance?: number;
  /**
   * A smoothed RTT past `slowRatio` × min RTT counts as a drop (default 2): a partner that
   * queues our requests inside itself is overloaded long before it times out. Netflix's
   * AIMDLimit has the same idea as an absolute `timeout` (5 s); relative works for any partner.
   */
  slowRatio?: number;
  /** Pins the baseline RTT (ms) instead of measuring it. */
  minRttMs?: number | undefined;
  /** Time constant (ms) of the decaying minimum RTT (default 60 000). */
  minRttDecayMs?: number;
  /** A minimum RTT unconfirmed this long (ms) triggers a dip to 3/4 (default 5 000). */
  probeMs?: number;
}

export const AIMD_DEFAULTS = Object.freeze({
  backoff: 0.9,
  tolerance: 1.2,
  slowRatio: 2,
  minRttDecayMs: 60_000,
  probeMs: 5_000,
});

/**
 * Loss-based AIMD, hostgate's default (Netflix recommends loss-based limits for clients):
 * additive increase of about one permit per round trip while the gate is using at least half
 * its limit and latency is steady; multiplicative decrease (×`backoff`) on a drop, at most once
 * per round trip (a burst of 503s is one signal, not fifty cuts).
 */
export class AimdLimit implements LimitAlgorithm {
  readonly name = 'aimd';
  readonly #bounds: LimitBounds;
  readonly #backoff: number;
  readonly #tolerance: number;
  readonly #slowRatio: number;
  readonly #minRtt: MinRtt;
  readonly #srtt = new Ewma();
  readonly #pacer = new CutPacer();
  /** RTT over the last ~10 samples: what the minimum is taken of (a lone fast sample is noise). */
  readonly #recentRtt = new Ewma();
  readonly #probe: RttProbe;
  #probing = false;
  #value: number;
  /** The limit the last cut was from: growth into it is slower. */
  readonly #dropLevel = new DropLevel();

  constructor(options: AimdOptions) {
    this.#bounds = { min: options.min, max: options.max, initial: options.initial };
    this.#backoff = options.backoff ?? AIMD_DEFAULTS.backoff;
    this.#tolerance = options.tolerance ?? AIMD_DEFAULTS.tolerance;
    this.#slowRatio = options.slowRatio ?? AIMD_DEFAULTS.slowRatio;
    this.#minRtt = new MinRtt({
      pinnedMs: options.minRttMs,
      decayMs: options.minRttDecayMs ?? AIMD_DEFAULTS.minRttDecayMs,
    });
    this.#probe = new RttProbe(options.probeMs ?? AIMD_DEFAULTS.probeMs);
    this.#value = clampLimit(options.initial, this.#bounds);
  }

  get limit(): number {
    const limit = Math.floor(this.#value);
    return this.#probing ? RttProbe.dip(limit, this.#bounds.min) : limit;
  }
  get minRttMs(): number | undefined {
    return this.#minRtt.value;
  }

  update(sample: LimitSample): number {
    const limit = Math.floor(this.#value);
    if (sample.dropped) {
      this.#cut(sample.now, this.#srtt.value ?? sample.rttMs, sample.now - sample.rttMs);
      return this.limit;
    }
    const recent = this.#recentRtt.add(sample.rttMs, 10);
    this.#minRtt.observe(recent, sample.now, limit <= this.#bounds.min);
    const srtt = this.#srtt.add(sample.rttMs, Math.max(10, limit));
    const base = this.#minRtt.value!;
    this.#probing = this.#probe.active(this.#minRtt, sample.now, srtt);
    if (srtt > this.#slowRatio * base) {
      this.#cut(sample.now, srtt);
    } else if (
      !this.#probing &&
      !sample.holdDown &&
      sample.inflight * 2 >= limit &&
      srtt <= this.#tolerance * base
    ) {
      const step = this.#dropLevel.step(limit, 1 / Math.max(1, limit));
      this.#value = clampLimit(this.#value + step, this.#bounds);
      this.#dropLevel.grew(Math.floor(this.#value));
    }
    return this.limit;
  }

  /** `grantedAt`: when the dropped request was granted (a slow RTT is no one request's). */
  #cut(now: number, rttMs: number, grantedAt?: number): void {
    if (this.#pacer.due(now, rttMs, grantedAt)) {
      this.#dropLevel.cut(Math.floor(this.#value));
      this.#value = clampLimit(Math.floor(this.#value * this.#backoff), this.#bounds);
    }
  }
}
