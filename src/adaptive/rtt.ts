/**
 * The RTT baselines the gradient-style algorithms compare against, measured passively.
 *
 * The minimum RTT is a *decaying minimum* (the algorithms feed it the RTT averaged over the
 * last ~10 requests, so one lucky fast response under a noisy event loop does not set a baseline
 * no ordinary request meets): a lower value replaces it at once; higher ones
 * pull it up slowly (time constant `decayMs`), so a partner whose baseline got slower (a
 * deploy) is re-learned without a probe that collapses the limit (Envoy drops every limit to 3
 * while it re-measures). It can also be pinned (`pinnedMs`): then it never moves.
 *
 * A decaying minimum alone drifts up under steady load: when every request queues a little at
 * the partner, no sample shows the true minimum and the baseline creeps towards the loaded RTT,
 * and the limit with it. So when no sample came within 5% of the minimum for `probeMs`, the
 * algorithm dips its limit to 3/4 for about two round trips ({@link RttProbe}): the partner's
 * queue drains and the true minimum shows again (BBRv2's gentle ProbeRTT, not BBRv1's cwnd of 4).
 * While the limit sits at its minimum and latency is still high, the old baseline is the likely
 * culprit (the partner got slower, it is not queueing our requests), so it decays 10× faster.
 */
export class MinRtt {
  readonly #pinned: number | undefined;
  readonly #decayMs: number;
  #value: number | undefined;
  #lastAt: number | undefined = undefined;
  /** Last time a sample came within 5% of the minimum. */
  #freshAt: number | undefined = undefined;

  constructor(options: { pinnedMs?: number | undefined; decayMs: number }) {
    this.#pinned = options.pinnedMs;
    this.#value = options.pinnedMs;
    this.#decayMs = options.decayMs;
  }

  get value(): number | undefined {
    return this.#value;
  }

  /** ms since a sample last confirmed the minimum (0 while pinned or unmeasured). */
  staleFor(now: number): number {
    return this.#freshAt === undefined ? 0 : now - this.#freshAt;
  }

  /** Feeds a (non-drop) sample taken at `now`; `fast` decays 10× faster. */
  observe(rttMs: number, now: number, fast = false): void {
    if (this.#pinned !== undefined) return;
    const last = this.#lastAt;
    this.#lastAt = now;
    const value = this.#value;
    if (value === undefined || rttMs <= value * 1.05) this.#freshAt = now;
    if (value === undefined || rttMs <= value) {
      this.#value = rttMs;
      return;
    }
    if (last === undefined) return;
    const tau = fast ? this.#decayMs / 10 : this.#decayMs;
    const weight = Math.min(1, Math.max(0, now - last) / tau);
    this.#value = value + (rttMs - value) * weight;
  }
}

/** The gentle RTT probe described on {@link MinRtt}: a dip to 3/4 for about two round trips. */
export class RttProbe {
  readonly #everyMs: number;
  #until = Number.NEGATIVE_INFINITY;

  constructor(everyMs: number) {
    this.#everyMs = everyMs;
  }

  /** True while probing; starts a probe when the minimum has gone unconfirmed too long. */
  active(minRtt: MinRtt, now: number, rttMs: number): boolean {
    if (now < this.#until) return true;
    if (minRtt.staleFor(now) < this.#everyMs || now < this.#until + this.#everyMs) return false;
    this.#until = now + 2 * rttMs;
    return true;
  }

  /** The limit to apply while probing. */
  static dip(limit: number, min: number): number {
    return Math.max(min, Math.floor(limit * 0.75));
  }
}

/**
 * An exponentially weighted moving average over about `window` samples; the window may change
 * per sample (about one limit's worth of samples is one round trip of a busy gate).
 */
export class Ewma {
  #value: number | undefined = undefined;

  get value(): number | undefined {
    return this.#value;
  }

  add(sample: number, window: number): number {
    const value = this.#value;
    this.#value = value === undefined ? sample : value + ((sample - value) * 2) / (window + 1);
    return this.#value;
  }
}

/**
 * At most one multiplicative cut per round trip: a burst of drops from one overload episode
 * (every request that was in flight answers 503) is one congestion signal, not fifty; cutting
 * ×0.9 per drop would collapse the limit to its minimum (TCP's "one cut per window" rule).
 *
 * The window is the requests in flight at the cut, as TCP's: a drop of a request granted
 * *after* the last cut saw the lowered limit and was still refused, a new signal, so it cuts
 * again at once (`grantedAt`). Without this, a partner that refuses at once past its capacity
 * answered one slot above it hundreds of 503s per round trip while the pacer waited (issue 33:
 * 97% of its answers in a second were 503).
 */
export class CutPacer {
  #lastCutAt = Number.NEGATIVE_INFINITY;

  /**
   * True (and remembers `now`) when a cut is due: the last one is older than `rttMs`, or the
   * dropped request was granted after it (`grantedAt`, on the same clock).
   */
  due(now: number, rttMs: number, grantedAt = Number.NEGATIVE_INFINITY): boolean {
    if (now - this.#lastCutAt < rttMs && grantedAt < this.#lastCutAt) return false;
    this.#lastCutAt = now;
    return true;
  }
}

/**
 * Growth into the level of the last cut is {@link PLATEAU} times slower: the limit settles below
 * the capacity it has just hit and probes it again every few round trips, not every one (TCP
 * CUBIC's plateau near its last loss, in one step). Against a partner that serves 5 and refuses
 * the sixth at once, AIMD growing back to 6 every round trip made about one answer in six a 503.
 * The level is forgotten once the limit grows past it: the probe found more capacity.
 */
export class DropLevel {
  #level = Number.POSITIVE_INFINITY;

  /** A cut from `limit`. */
  cut(limit: number): void {
    this.#level = limit;
  }

  /** The growth to apply at `limit`: slower one step below the level and at it. */
  step(limit: number, growth: number): number {
    return limit + 1 >= this.#level ? growth / PLATEAU : growth;
  }

  /** The limit is now `limit`: past the level, the level is forgotten. */
  grew(limit: number): void {
    if (limit > this.#level) this.#level = Number.POSITIVE_INFINITY;
  }
}

/** How many times slower growth into the last cut's level is (see {@link DropLevel}). */
export const PLATEAU = 4;
