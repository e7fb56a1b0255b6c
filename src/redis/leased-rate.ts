/**
 * A leased gate's request rate, the process's side: the rate checked for leasing (whole calls),
 * the burst that goes with a share, and the demand a process reports for its share. Redis's side,
 * the apportioning and the counting of shares, is REFRESH (commands/leasedRefresh-4.lua).
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
 * The least share that carries a call of `cost` at all: its share and burst share together
 * (`share + rateShareOf(share)`), all a window of `per` may hold of it, at least the cost (0 for
 * a cost of 1 or less; at most `limit`, which carries `burst + 1`). The gate's GCRA sends such a
 * call once the process has gone that much beyond a full bucket without sending (the idle
 * credit, GateRate.waitMs). A floor of the process's rate share while such a call waits at its
 * head: below it the call could never be sent (issue 32: the cost stall). Before the idle
 * credit it was the share whose burst share alone was `cost − 1`: cost 3 at burst 2 needed
 * the whole rate.
 */
export function rateNeedOf(rate: ResolvedRate, cost: number): number {
  if (!(cost > 1)) return 0;
  // share × (1 + burst / limit) ≥ cost at least, and the floor loses under one unit: a step or two.
  let share = Math.max(1, Math.floor((cost * rate.limit) / (rate.limit + rate.burst)));
  while (share < rate.limit && share + rateShareOf(rate, share) < cost) share++;
  return Math.min(share, rate.limit);
}

/** A clean close's sends of the last window, in this many buckets by age. */
export const TAIL_BUCKETS = 8;

/**
 * A process's rate demand: the cost units it took in the last `per` ms (from a few samples of
 * the gate's running totals) plus the units queued, as a peak that decays like a leased gate's
 * concurrency demand. A process its share held back in that window (a call found no slot) asks
 * for at least twice its share: callers that wait for each call before the next (a closed loop)
 * queue one call at a time, and would otherwise grow their share by one call a window. It
 * asks for the equal split at least: max-min fairness gives it no more than that while the
 * others want it, and a newcomer has its share within a refresh.
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
   * Cost units taken in the last `per` ms, in `TAIL_BUCKETS` buckets by age: bucket k holds the
   * units taken between k and k + 1 eighths of a window ago (each counted at the young end of
   * its bucket, and at the sample that saw it: never older than it is). A clean close sends
   * them; Redis keeps at most the burst share + 1 of them counted, for a window (what a paced
   * process may have sent ahead of its pace).
   */
  sentByAge(taken: number, now: number): number[] {
    const buckets = new Array<number>(TAIL_BUCKETS).fill(0);
    const at = this.#at;
    const width = this.#per / TAIL_BUCKETS;
    let later = taken;
    for (let i = at.length - 1; i >= -1; i--) {
      // Units taken after sample i (before the next one, or now): seen at the next sample.
      const seenAt = i + 1 < at.length ? at[i + 1]! : now;
      const age = now - seenAt;
      if (age >= this.#per) break;
      const before = i >= 0 ? this.#taken[i]! : 0;
      if (i < 0 && at.length > 0) break; // no sample before the oldest: counted with it
      const units = Math.max(0, later - before);
      later = before;
      buckets[Math.min(TAIL_BUCKETS - 1, Math.floor(age / width))]! += units;
    }
    return buckets;
  }

  /**
   * Whole calls per `per` to ask Redis for (at most `limit`), given the share sent at now and
   * the equal split of the rate among the processes (`split`).
   */
  wants(
    use: { taken: number; backlog: number; throttled: number },
    share: number,
    now: number,
    limit: number,
    split = 0,
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
    // Held back: at least twice the share, and at least the equal split (a newcomer's demand is
    // not known until it sends: doubling from nothing would take it several windows to reach
    // its share, and a rolling deploy would run below the rate; issue 32, item 6).
    const held = use.throttled > this.#throttled[0]! ? Math.max(2 * share, 1, split) : 0;
    return this.#demand.wants(Math.max(used, held), now, limit);
  }
}
