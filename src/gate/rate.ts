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
 *
 * `slack` (a local gate's, ms) holds that promise where the calls arrive rather than where they
 * are granted: a call reaches its partner a latency after its grant, and that latency varies (a
 * cold connection's setup, the event loop), so grants bunched by the rate may arrive bunched
 * tighter. If every latency lies within `slack` of every other, the arrivals in a window of
 * `per` were granted within `per + slack`; so the gate keeps at most `limit + burst` in any
 * window of `per + slack` ({@link paceOf}).
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

/**
 * A local gate's rate (a `Semaphore`'s or a local partner rule's), which may also allow for the
 * spread of its calls' latencies to the partner.
 */
export interface LocalRateOptions extends RateOptions {
  /**
   * How far apart (ms) two calls' grant-to-arrival latencies may lie while the promise still
   * holds at the partner (default 0 on a `Semaphore`: the grant is the promise;
   * {@link DEFAULT_PARTNER_RATE_SLACK_MS} on a partner rule without a `cost`). The gate then
   * keeps at most `limit + burst` in any window of `per + slack`: it takes the slack out of the
   * burst, keeping two slots of it for timers' lateness, and out of the pace when the burst is
   * smaller.
   */
  slack?: number;
}

/**
 * A partner rule's default `rate.slack`: 100 ms. On loopback, 1,000 calls over 50 cold
 * connections reached the partner 10 to 200 ms after their grants (connection setup and a busy
 * event loop), and at 200/s with a burst of 20 the partner counted 230 in one second.
 */
export const DEFAULT_PARTNER_RATE_SLACK_MS = 100;

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
  /** A local gate's `slack` (ms): the promise holds at the partner for latencies this far apart. */
  slack?: number;
}

export interface ResolvedRate {
  readonly limit: number;
  readonly per: number;
  readonly burst: number;
  /** A local gate's `slack` (ms); absent: 0. */
  readonly slack?: number;
}

const RATE_KEYS = ['limit', 'per', 'burst'] as const;
const LOCAL_RATE_KEYS = [...RATE_KEYS, 'slack'] as const;

/**
 * Checks a `rate` option: a TypeError or RangeError naming the option and the value. `local`:
 * a local gate's, which may have a `slack`; a shared gate's (Redis) has none.
 */
export function resolveRate(where: string, rate: unknown, local = false): ResolvedRate {
  checkObject(where, rate);
  if (!local && (rate as LocalRateOptions).slack !== undefined) {
    throw new TypeError(
      `${where}.slack is ${describe((rate as LocalRateOptions).slack)}, but a shared gate's rate has no slack (it is taken in Redis): remove it, or leave more headroom in rate.limit`,
    );
  }
  checkKnownKeys(where, rate, local ? LOCAL_RATE_KEYS : RATE_KEYS);
  const { limit, per = 1000, burst = 0 } = rate as RateOptions;
  if (typeof limit !== 'number' || !(limit > 0) || !Number.isFinite(limit)) {
    throw new TypeError(`${where}.limit must be a positive finite number, got ${describe(limit)}`);
  }
  if (typeof per !== 'number' || !(per > 0) || !Number.isFinite(per)) {
    throw new TypeError(
      `${where}.per must be a positive finite number of ms, got ${describe(per)}`,
    );
  }
  const resolved = { limit, per, burst: nonNegativeInteger(`${where}.burst`, burst) };
  if (!local) return resolved;
  const { slack = 0 } = rate as LocalRateOptions;
  if (typeof slack !== 'number' || !(slack >= 0) || !Number.isFinite(slack)) {
    throw new TypeError(
      `${where}.slack must be a non-negative finite number of ms, got ${describe(slack)}`,
    );
  }
  return slack === 0 ? resolved : { ...resolved, slack };
}

/**
 * A partner rule's local rate: `slack` defaults to {@link DEFAULT_PARTNER_RATE_SLACK_MS}, unless
 * the rule charges a `cost` (a slack takes from the burst, and so from the most one call may
 * cost: a cost that was valid must stay valid; such a rule sets its `slack` itself).
 */
export function partnerRate(
  rate: LocalRateOptions | undefined,
  costed: boolean,
): LocalRateOptions | undefined {
  if (rate === undefined || rate === null || typeof rate !== 'object' || costed) return rate;
  return rate.slack !== undefined ? rate : { ...rate, slack: DEFAULT_PARTNER_RATE_SLACK_MS };
}

/**
 * The GCRA's emission interval `T'` and reach (`τ + T'`, ms) that keep at most `limit + burst`
 * units in any window of `per + slack`. Any `limit + burst + 1` units then span at least
 * `(limit + burst + 1) × T' − reach`, which is `per + slack` with
 * `reach = (limit + burst + 1) × T' − per − slack`. The slack comes out of the burst first
 * (`T' = per / limit`), keeping `min(burst, 2)` slots of it, which absorb a timer's lateness
 * (with none, 200/s ran at 83%); past that the pace gives way:
 * `T' = (per + slack) / (limit + burst − kept)`. With no slack: `T' = per / limit`,
 * `reach = (burst + 1) × T'`.
 */
export function paceOf(rate: ResolvedRate): { interval: number; reach: number } {
  const { limit, per, burst } = rate;
  const slack = rate.slack ?? 0;
  const interval = per / limit;
  const kept = Math.min(burst, 2);
  if (burst - slack / interval >= kept) return { interval, reach: (burst + 1) * interval - slack };
  // `(kept + 1) × T'` is `(limit + burst + 1) × T' − per − slack` with this `T'`, and exactly the
  // cost of `kept + 1` slots: a lone call on an idle gate conforms without a float's hair.
  const paced = (per + slack) / (limit + burst - kept);
  return { interval: paced, reach: (kept + 1) * paced };
}

/** The most one call may cost: `burst + 1`, less what a `slack` took of the burst. */
function maxCost(rate: ResolvedRate): number {
  const { interval, reach } = paceOf(rate);
  // A hair of float error must not refuse `burst + 1` on a rate without slack.
  return rate.slack === undefined ? rate.burst + 1 : reach / interval + 1e-9;
}

/** A call's `cost`: a non-negative finite number (a RangeError past what the rate could grant). */
export function checkCost(cost: unknown, rate: ResolvedRate | undefined, gate: string): number {
  if (typeof cost !== 'number' || !(cost >= 0) || !Number.isFinite(cost)) {
    throw new TypeError(`cost must be a non-negative finite number, got ${describe(cost)}`);
  }
  if (rate === undefined) {
    throw new TypeError(`cost counts against a rate, and ${gate} has none: set its rate option`);
  }
  const most = maxCost(rate);
  if (cost > most) {
    throw new RangeError(
      rate.slack === undefined
        ? `cost ${cost} exceeds burst + 1 (${rate.burst + 1}) of ${gate}'s rate: it could never be granted; raise rate.burst`
        : `cost ${cost} exceeds ${Math.floor(most)}, the most one call may cost on ${gate}'s rate (burst + 1 = ${rate.burst + 1}, less what slack ${rate.slack} ms takes of the burst): it could never be granted; raise rate.burst or lower rate.slack`,
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
  /**
   * The most units one call may cost on a leased share: the share and its burst (`limit + burst`
   * of it), all that any window of `per` may hold of it. Local gates: no bound here (checkCost's).
   */
  #carry = Number.POSITIVE_INFINITY;
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
    const pace = paceOf(options);
    this.interval = pace.interval;
    this.#reach = pace.reach;
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
   * `holdMs`: no slot sooner than that from now (a share taken over from a process that closed
   * goes on from that process's pace).
   */
  share(rate: ResolvedRate, limit: number, burst: number, until: number, holdMs = 0): void {
    const now = this.now();
    const had = !this.#off && now < this.#until;
    this.#options = rate;
    this.#off = !(limit > 0);
    this.#until = until;
    if (!this.#off) {
      // A share begins with a full bucket, not with credit for time before it: the idle credit
      // (waitMs) is for time this process held a share and sent nothing. Without a share the
      // rate was others' to send at, and a fresh fleet's processes each sent a costly call at
      // once (fault campaign seed 72021: 13 units in 111 ms at a promise of 12).
      if (!had) this.#tat = Math.max(this.#tat, now);
      const interval = rate.per / limit;
      // A call that cost more than the burst (the idle credit, waitMs) left the TAT up to its
      // cost ahead of now, beyond the `burst + 1` intervals Redis counts a share's lead at when
      // it goes down. At a slower pace that excess is carried in units, not in ms: a window
      // straddling the change holds no more than the standard lead would have let through.
      const excess = this.#tat - now - this.#reach;
      if (excess > 0 && interval > this.interval) {
        this.#tat += excess * (interval / this.interval - 1);
      }
      this.interval = interval;
      this.#reach = (burst + 1) * interval;
      this.#carry = limit + burst;
      // A share taken over from a process that closed: its pace goes on from that process's TAT.
      if (holdMs > 0) this.#tat = Math.max(this.#tat, now + holdMs);
    }
    this.idle();
    this.onSlot();
  }

  /**
   * Ms from `now` until `cost` units conform after `ahead` units queued before them (≤ 0: now).
   *
   * A call alone at the head whose cost is more than a full bucket holds (`cost × T > reach`:
   * on a leased share, whose burst is `floor(burst × share / limit)`) conforms once the TAT lies
   * that excess behind now: the process sent nothing for that long beyond a full bucket. Idle
   * time is otherwise forgotten (the TAT is never taken below now), so the credit is spent
   * within the window it accrued in: the promise's proof (calls a₀ … aₖ summing to S have
   * `aₖ ≥ a₀ + (S − burst − 1) × T`) uses only the last call's condition, which is unchanged,
   * and a call alone in a window costs at most what the share carries (`limit + burst` of it:
   * more waits for a larger share, the process's rate need). Before, such a call conformed only
   * with a burst share of `cost − 1`: a share of most of the rate (issue 32, the costs limit).
   */
  waitMs(cost: number, ahead: number, now: number): number {
    // No share (a leased gate between shares), or one too small for this cost: when a slot
    // comes is Redis's to say, not known here.
    if (this.#off || now >= this.#until || cost > this.#carry) return 0;
    const over = ahead === 0 ? cost * this.interval - this.#reach : 0;
    if (over > 0) return this.#tat <= now - over ? 0 : this.#tat + over - now;
    // `tat - now` first: exactly 0 for a fresh or idle gate, where `tat + x - reach - now` could
    // round to a hair above 0 on a large clock reading and refuse a call that conforms.
    const tat = Math.max(this.#tat, now);
    return tat - now + ((ahead + cost) * this.interval - this.#reach);
  }

  /** How far ahead of now the TAT runs, in units of the pace (a leased process's close reports it). */
  lead(): number {
    const now = this.now();
    return this.#tat > now ? (this.#tat - now) / this.interval : 0;
  }

  /** The same in ms: when this process's pace would have let its next call go. */
  leadMs(): number {
    return Math.max(0, this.#tat - this.now());
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
    if (this.#off || now >= this.#until || cost > this.#carry) {
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
      ...(this.#options.slack === undefined ? {} : { slack: this.#options.slack }),
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
