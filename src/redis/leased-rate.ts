/**
 * A leased gate's request rate, the process's side: the rate checked for leasing (whole calls),
 * the burst that goes with a share, and the demand a process reports for its share. Redis's side,
 * the apportioning and the counting of shares, is in leased-scripts.ts (REFRESH).
 */
import { describe } from '../common/options.js';
import { type RateOptions, type ResolvedRate, resolveRate } from '../gate/rate.js';
import { Demand } from './leased-share.js';

/**
 * A leased gate's `rate`: as any gate's, and its `limit` a whole number, since shares are leased
 * in whole calls per `per` (a fraction could not be split among processes without each rounding
 * up and the fleet going over).
 */
export function leasedRate(rate: RateOptions): ResolvedRate {
  const resolved = resolveRate('rate', rate);
  if (!Number.isInteger(resolved.limit)) {
    const per = resolved.per;
    throw new RangeError(
      `rate.limit of a leased shared gate must be a whole number of calls per ${per} ms (its processes lease whole calls of it), got ${describe(resolved.limit)}: scale per instead, e.g. { limit: ${Math.round(resolved.limit * 10)}, per: ${per * 10} }`,
    );
  }
  return resolved;
}

/**
 * The burst that goes with a share of `share` calls of `rate`: `floor(burst × share / limit)`.
 * Over every process's counted shares (Σ ≤ limit) the bursts add up to at most `burst`.
 */
export function rateShareOf(rate: ResolvedRate, share: number): number {
  return share <= 0 ? 0 : Math.floor((rate.burst * share) / rate.limit);
}

/**
 * A process's rate demand: the cost units it took in the last `per` ms (from a few samples of
 * the gate's running totals) plus the units queued, as a peak that decays like a leased gate's
 * concurrency demand. A process its share held back in that window (a call found no slot) asks
 * for at least twice its share: callers that wait for each call before the next (a closed loop)
 * queue one call at a time, and would otherwise grow their share by one call a window.
 */
export class RateUse {
  readonly #at: number[] = [];
  readonly #taken: number[] = [];
  readonly #throttled: number[] = [];
  readonly #per: number;
  /** Samples at most this often: at most 64 per window. */
  readonly #every: number;
  readonly #demand: Demand;

  constructor(per: number, refreshMs: number) {
    this.#per = per;
    this.#every = per / 64;
    this.#demand = new Demand(refreshMs);
  }

  /**
   * Cost units taken in the last `per` ms (from the oldest sample kept, at or before the
   * window's start: never less than the window's).
   */
  sent(taken: number, now: number): number {
    const at = this.#at;
    while (at.length > 1 && at[1]! <= now - this.#per) {
      at.shift();
      this.#taken.shift();
      this.#throttled.shift();
    }
    return at.length === 0 ? taken : Math.max(0, taken - this.#taken[0]!);
  }

  /** Whole calls per `per` to ask Redis for (at most `limit`), given the share sent at now. */
  wants(
    use: { taken: number; backlog: number; throttled: number },
    share: number,
    now: number,
    limit: number,
  ): number {
    const at = this.#at;
    if (at.length === 0 || now - at[at.length - 1]! >= this.#every) {
      at.push(now);
      this.#taken.push(use.taken);
      this.#throttled.push(use.throttled);
    }
    // Keep one sample at or before the window's start: the units since it are the window's.
    while (at.length > 1 && at[1]! <= now - this.#per) {
      at.shift();
      this.#taken.shift();
      this.#throttled.shift();
    }
    const used = Math.max(0, use.taken - this.#taken[0]!) + use.backlog;
    const held = use.throttled > this.#throttled[0]! ? Math.max(2 * share, 1) : 0;
    return this.#demand.wants(Math.max(used, held), now, limit);
  }
}
