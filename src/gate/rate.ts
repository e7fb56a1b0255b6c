/**
 * A gate's request rate: GCRA (the generic cell rate algorithm, as in redis-cell and Go's
 * `throttled`), one timestamp per gate, the theoretical arrival time (TAT). Built only for a
 * gate with a `rate`: a gate without one never reaches this file.
 *
 * The promise: the units granted (a call's `cost`, 1 by default) in any half-open window of
 * `per` ms add up to at most `limit + burst`. With emission interval `T = per / limit` and
 * tolerance `τ = burst × T`, a call of cost `c` conforms at `now` when
 * `max(TAT, now) + c × T − now ≤ τ + T`, and then `TAT = max(TAT, now) + c × T`. Proof sketch:
 * calls a₀ … aₖ with costs summing to `S` have `aₖ ≥ a₀ + (S − burst − 1) × T`, so
 * `S ≥ limit + burst + 1` spans at least `per`. Hence a single call costs at most `burst + 1`.
 */
import { RateLimitedError } from '../common/errors.js';
import { checkKnownKeys, checkObject, describe, nonNegativeInteger } from '../common/options.js';

/** A gate's request rate (`rate` of a Semaphore, a partner rule, or a shared gate). */
export interface RateOptions {
  /** Calls (cost units) per `per` ms, sustained: a positive finite number. */
  limit: number;
  /** The window, in ms (default 1000): a positive finite number. */
  per?: number;
  /**
   * Calls (cost units) allowed beyond the steady pace (default 0): a non-negative integer. The
   * promise is at most `limit + burst` units in any window of `per` ms; a single call may cost
   * at most `burst + 1`.
   */
  burst?: number;
}

/** `stats().rate`: the rate's state now. */
export interface RateStats {
  limit: number;
  per: number;
  burst: number;
  /** Ms until a call of cost 1 would conform, ignoring the queue (0: now). */
  nextSlotMs: number;
  /** Cost units waiting in the queue. */
  backlog: number;
  /** Callers shed at once because their wait deadline came before their slot could. */
  shedRateLimited: number;
}

export interface ResolvedRate {
  readonly limit: number;
  readonly per: number;
  readonly burst: number;
}

const RATE_KEYS = ['limit', 'per', 'burst'] as const;

/** Checks a `rate` option: a TypeError or RangeError naming the option and the value. */
export function resolveRate(where: string, rate: unknown): ResolvedRate {
  checkObject(where, rate);
  checkKnownKeys(where, rate, RATE_KEYS);
  const { limit, per = 1000, burst = 0 } = rate as RateOptions;
  if (typeof limit !== 'number' || !(limit > 0) || !Number.isFinite(limit)) {
    throw new TypeError(`${where}.limit must be a positive finite number, got ${describe(limit)}`);
  }
  if (typeof per !== 'number' || !(per > 0) || !Number.isFinite(per)) {
    throw new TypeError(
      `${where}.per must be a positive finite number of ms, got ${describe(per)}`,
    );
  }
  return { limit, per, burst: nonNegativeInteger(`${where}.burst`, burst) };
}

/** A call's `cost`: a non-negative finite number (a RangeError past what the rate could grant). */
export function checkCost(cost: unknown, rate: ResolvedRate | undefined, gate: string): number {
  if (typeof cost !== 'number' || !(cost >= 0) || !Number.isFinite(cost)) {
    throw new TypeError(`cost must be a non-negative finite number, got ${describe(cost)}`);
  }
  if (rate === undefined) {
    throw new TypeError(`cost counts against a rate, and ${gate} has none: set its rate option`);
  }
  if (cost > rate.burst + 1) {
    throw new RangeError(
      `cost ${cost} exceeds burst + 1 (${rate.burst + 1}) of ${gate}'s rate: it could never be granted; raise rate.burst`,
    );
  }
  return cost;
}

/** `permit.settleCost(actual)`'s argument, on a gate that has a rate. */
export function checkSettled(
  /** The gate's rate, local or shared: only whether it has one is checked. */
  rate: object | undefined,
  gate: string | undefined,
  actual: unknown,
): number {
  if (typeof actual !== 'number' || !(actual >= 0) || !Number.isFinite(actual)) {
    throw new TypeError(
      `settleCost(actual): a non-negative finite number, got ${describe(actual)}`,
    );
  }
  if (rate === undefined) {
    throw new TypeError(`settleCost: ${gate ?? 'this gate'} has no rate to settle against`);
  }
  return actual;
}

/** One gate's GCRA state and its one timer: the slot of the queue's head. */
export class GateRate {
  /** Emission interval, ms per unit (of this process's share, on a leased shared gate). */
  interval: number;
  /** `τ + T`: how far past `now` the TAT may go after a conforming call. */
  #reach: number;
  #options: ResolvedRate;
  /** A leased gate's share is 0: no slot until Redis gives one (and no refusal at join for it). */
  #off = false;
  /** A leased gate's share is usable until then (its lease, or an answer overdue). */
  #until = Number.POSITIVE_INFINITY;
  #tat = Number.NEGATIVE_INFINITY;
  /** Cost units taken since the gate was made, and calls that found no slot (a leased gate's demand reads them). */
  taken = 0;
  throttled = 0;
  /** Cost units queued (the gate adds on join, subtracts on leaving the queue). */
  backlog = 0;
  /** Waiters' and permits' costs other than 1 (the default, never stored). */
  readonly #costs = new WeakMap<object, number>();
  shed = 0;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  #timerAt = Number.POSITIVE_INFINITY;

  constructor(
    options: ResolvedRate,
    private readonly now: () => number,
    /** The head's slot may have come: the gate serves its queue. */
    private readonly onSlot: () => void,
  ) {
    this.#options = options;
    this.interval = options.per / options.limit;
    this.#reach = (options.burst + 1) * this.interval;
  }

  /** The rate (for a leased shared gate: the whole fleet's, as Redis holds it). */
  get options(): ResolvedRate {
    return this.#options;
  }

  /**
   * A leased shared gate's rate: `rate` as Redis holds it for every process, and this process's
   * share of it, `limit` whole calls per `rate.per` with `burst` (a `limit` of 0: none now),
   * usable until `until` on the gate's clock (then none, until the next share). The timestamp
   * stays (what was taken stays taken); the queue is served, its head's slot may be now.
   */
  share(rate: ResolvedRate, limit: number, burst: number, until: number): void {
    this.#options = rate;
    this.#off = !(limit > 0);
    this.#until = until;
    if (!this.#off) {
      this.interval = rate.per / limit;
      this.#reach = (burst + 1) * this.interval;
    }
    this.idle();
    this.onSlot();
  }

  /** Ms from `now` until `cost` units conform after `ahead` units queued before them (≤ 0: now). */
  waitMs(cost: number, ahead: number, now: number): number {
    // No share (a leased gate between shares): when a slot comes is Redis's to say, not known here.
    if (this.#off || now >= this.#until) return 0;
    // `tat - now` first: exactly 0 for a fresh or idle gate, where `tat + x - reach - now` could
    // round to a hair above 0 on a large clock reading and refuse a call that conforms.
    const tat = Math.max(this.#tat, now);
    return tat - now + ((ahead + cost) * this.interval - this.#reach);
  }

  /**
   * A caller of `cost` whose slot, after the cost queued ahead of it, comes later than its wait
   * deadline (`timeout` ms): the error to shed it with now, its `retryAfterMs` that slot.
   */
  refuse(gate: string | undefined, cost: number, timeout: number): RateLimitedError | undefined {
    const slotMs = this.waitMs(cost, this.backlog, this.now());
    if (slotMs <= timeout) return undefined;
    this.shed++;
    return new RateLimitedError(gate, this.options, this.backlog, Math.max(1, Math.ceil(slotMs)));
  }

  /**
   * Takes `cost` units now if they conform; otherwise arms the gate's timer for their slot and
   * returns false (the caller waits, at the head of the queue or joining it).
   */
  take(cost: number): boolean {
    const now = this.now();
    if (this.#off || now >= this.#until) {
      this.throttled++;
      return false; // the next share serves the queue
    }
    const wait = this.waitMs(cost, 0, now);
    if (wait > 0) {
      this.throttled++;
      this.#arm(now + wait);
      return false;
    }
    this.#tat = Math.max(this.#tat, now) + cost * this.interval;
    this.taken += cost;
    return true;
  }

  costOf(call: object): number {
    return this.#costs.get(call) ?? 1;
  }

  /** A permit granted at once, charged `cost`. */
  charge(permit: object, cost: number): void {
    if (cost !== 1) this.#costs.set(permit, cost);
  }

  /** A waiter of `cost` joins the queue. */
  queued(waiter: object, cost: number): void {
    this.charge(waiter, cost);
    this.backlog += cost;
  }

  /**
   * A permit charged its cost used `actual`: the TAT moves by the difference. Extra units
   * are taken as of now, unchecked (a debt the next calls wait out); a refund moves the TAT
   * back, never below now (no credit beyond a full bucket). Returns whether it moved earlier.
   */
  settle(permit: object, actual: number): boolean {
    const charged = this.costOf(permit);
    this.#costs.set(permit, actual);
    this.taken += actual - charged;
    const now = this.now();
    const tat = this.#tat;
    if (actual > charged) this.#tat = Math.max(tat, now) + (actual - charged) * this.interval;
    else if (tat > now) this.#tat = Math.max(now, tat - (charged - actual) * this.interval);
    return actual < charged;
  }

  stats(): RateStats {
    const { limit, per, burst } = this.options;
    const next = this.waitMs(1, 0, this.now());
    return {
      limit,
      per,
      burst,
      nextSlotMs: Math.max(next, 0),
      backlog: this.backlog,
      shedRateLimited: this.shed,
    };
  }

  /** The queue emptied: no slot to wait for. */
  idle(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#timerAt = Number.POSITIVE_INFINITY;
    }
  }

  /**
   * Timers count whole ms and fire about a ms late (sometimes a fraction early: the slot is
   * checked again then). With `burst: 0` that lateness is lost for good (GCRA gives no credit
   * for it): 200/s ran at about 83% here. A burst of a few slots absorbs it. Polling the last
   * fraction of a ms on setImmediate bought no goodput and cost 3.5x the CPU per call.
   */
  #arm(at: number): void {
    if (this.#timer !== undefined) {
      if (this.#timerAt <= at) return;
      clearTimeout(this.#timer);
    }
    this.#timerAt = at;
    this.#timer = setTimeout(this.#fire, Math.max(1, Math.ceil(at - this.now())));
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    this.#timerAt = Number.POSITIVE_INFINITY;
    this.onSlot();
  };
}
