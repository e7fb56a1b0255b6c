import {
  clampLimit,
  type LimitAlgorithm,
  type LimitBounds,
  type LimitSample,
} from './algorithm.js';
import { CutPacer, DropLevel, Ewma, MinRtt, RttProbe } from './rtt.js';

export interface GradientOptions extends LimitBounds {
  /** RTT inflation accepted before the limit shrinks: 1.0 aims at no queue at the partner. */
  tolerance?: number;
  /** Requests allowed to queue at the partner, so growth can find new capacity (default 4). */
  queueSize?: number;
  /** Weight of each new lower target per round trip (default 0.2, Gradient2's `smoothing`). */
  smoothing?: number;
  /** Multiplier on a drop (default 0.9). */
  backoff?: number;
  /** Pins the baseline RTT (ms) instead of measuring it. */
  minRttMs?: number | undefined;
  /** Time constant (ms) of the decaying minimum RTT (default 60 000). */
  minRttDecayMs?: number;
  /** A minimum RTT unconfirmed this long (ms) triggers a dip to 3/4 (default 5 000). */
  probeMs?: number;
}

export const GRADIENT_DEFAULTS = Object.freeze({
  tolerance: 1.05,
  queueSize: 4,
  smoothing: 0.2,
  backoff: 0.9,
  minRttDecayMs: 60_000,
  probeMs: 5_000,
});

/**
 * Latency gradient, hostgate's own: Gradient2's update rule (target = limit × gradient +
 * queueSize, smoothed) with its two flaws fixed.
 *
 * - **Upward drift** (Netflix/concurrency-limits PR #134): Gradient2 divides a *long-window
 *   average* of RTT by the short one. Under modest steady overload the long average catches
 *   up with the short one, the gradient returns to 1, and every update adds `queueSize`. Here
 *   the baseline is the minimum RTT (a decaying minimum, or pinned): queueing at the partner
 *   keeps the gradient below 1 for as long as it lasts, so the limit settles at about
 *   capacity × tolerance + queueSize instead of climbing.
 * - **Drops ignored**: Gradient2 feeds a drop's RTT like any other. Here a drop cuts the limit
 *   (×`backoff`, once per round trip), as AIMD does.
 */
export class GradientLimit implements LimitAlgorithm {
  readonly name = 'gradient';
  readonly #bounds: LimitBounds;
  readonly #tolerance: number;
  readonly #queueSize: number;
  readonly #smoothing: number;
  readonly #backoff: number;
  readonly #minRtt: MinRtt;
  readonly #shortRtt = new Ewma();
  readonly #pacer = new CutPacer();
  /** The limit the last drop cut from: growth into it is slower. */
  readonly #dropLevel = new DropLevel();
  /** RTT over the last ~10 samples: what the minimum is taken of (a lone fast sample is noise). */
  readonly #recentRtt = new Ewma();
  readonly #probe: RttProbe;
  #probing = false;
  #value: number;

  constructor(options: GradientOptions) {
    this.#bounds = { min: options.min, max: options.max, initial: options.initial };
    this.#tolerance = options.tolerance ?? GRADIENT_DEFAULTS.tolerance;
    this.#queueSize = options.queueSize ?? GRADIENT_DEFAULTS.queueSize;
    this.#smoothing = options.smoothing ?? GRADIENT_DEFAULTS.smoothing;
    this.#backoff = options.backoff ?? GRADIENT_DEFAULTS.backoff;
    this.#minRtt = new MinRtt({
      pinnedMs: options.minRttMs,
      decayMs: options.minRttDecayMs ?? GRADIENT_DEFAULTS.minRttDecayMs,
    });
    this.#probe = new RttProbe(options.probeMs ?? GRADIENT_DEFAULTS.probeMs);
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
      const grantedAt = sample.now - sample.rttMs;
      if (this.#pacer.due(sample.now, this.#shortRtt.value ?? sample.rttMs, grantedAt)) {
        this.#dropLevel.cut(limit);
        this.#value = clampLimit(Math.floor(this.#value * this.#backoff), this.#bounds);
      }
      return this.limit;
    }
    const recent = this.#recentRtt.add(sample.rttMs, 10);
    this.#minRtt.observe(recent, sample.now, limit <= this.#bounds.min);
    const shortRtt = this.#shortRtt.add(sample.rttMs, Math.max(10, limit));
    const gradient = Math.max(0.5, Math.min(1, (this.#tolerance * this.#minRtt.value!) / shortRtt));
    this.#probing = this.#probe.active(this.#minRtt, sample.now, shortRtt);
    const target = this.#value * gradient + this.#queueSize;
    // Growth needs a gate that uses its limit (Netflix: skip while app-limited), no hold and
    // no probe under way.
    if (target > this.#value && (this.#probing || sample.holdDown || sample.inflight * 2 < limit)) {
      return this.limit;
    }
    // Applied over a round trip (about `limit` samples): per sample, a gate of 500 would
    // replace its limit many times over before the RTT could show the effect. Shrinking is
    // smoothed (`smoothing`); growth is not (up to +queueSize per round trip), so a gate below
    // its partner's capacity gets there in a few round trips.
    const growing = target > this.#value;
    const weight = growing ? 1 : this.#smoothing;
    let change = ((target - this.#value) * weight) / Math.max(1, limit);
    if (growing) change = this.#dropLevel.step(limit, change);
    this.#value = clampLimit(this.#value + change, this.#bounds);
    this.#dropLevel.grew(Math.floor(this.#value));
    return this.limit;
  }
}
