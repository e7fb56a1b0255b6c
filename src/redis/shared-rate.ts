/**
 * A FIFO shared gate's request rate, seen from one process. The rate itself (GCRA's timestamp,
 * the cost queued) lives in Redis and is taken by the same script that grants the permit, at the
 * head of the one shared queue (commands/*.lua). This process keeps: the rate Redis holds, the state
 * of its last answer (for `stats().rate`), the timer that claims its ticket at the head when the
 * head's slot comes (no release will hand it on), settled costs batched per tick, and while
 * Redis is unreachable its share of the rate.
 */
import { RateLimitedError } from '../common/errors.js';
import type { RateStats, ResolvedRate } from '../gate/rate.js';

/**
 * A grant of the rate is good for its slot: one that reaches its process (or is claimed) more
 * than `max(LATE_FLOOR_MS, per / limit)` after Redis made it is taken again, for a slot of now,
 * rather than sent on top of the calls granted since (a stalled replica's grants, all sent when
 * it wakes, bunched 64-73 calls into a second at a promise of 55: issue 32). The floor covers a
 * loaded machine's round trips, so a healthy claim is never late.
 */
export const LATE_FLOOR_MS = 250;

/** The rate's part of every script's reply (commands/includes/reply.lua, `withRate`). */
export interface RateTail {
  /** `<ticket>@<ms>`: the head whose permit is free gets its slot in ms; '' if none. */
  hint: string;
  /** Ms until a call of cost 1 would conform, ignoring the queue. */
  nextSlotMs: number;
  /** Cost units queued across every process. */
  backlog: number;
  /** The rate Redis holds, `limit:per:burst`; '' for a gate without one. */
  rate: string;
}

export function rateTail(reply: unknown, at: number): RateTail {
  const r = reply as unknown[];
  return {
    hint: String(r[at] ?? ''),
    nextSlotMs: Number(r[at + 1] ?? 0),
    backlog: Number(r[at + 2] ?? 0),
    rate: String(r[at + 3] ?? ''),
  };
}

/** A rate as the scripts take it: `limit:per:burst`. */
export function rateArg(rate: ResolvedRate): string {
  return `${rate.limit}:${rate.per}:${rate.burst}`;
}

function parseRate(text: string): ResolvedRate | undefined {
  const [limit, per, burst] = text.split(':').map(Number);
  if (!(limit! > 0) || !(per! > 0) || !(burst! >= 0)) return undefined;
  return { limit: limit!, per: per!, burst: burst! };
}

export interface SharedRateHooks {
  /** The head's slot came: claim ticket `id` (its grant is Redis's to make). */
  slot(id: string): void;
  /** Costs settled: the timestamp in Redis moves by `units` (negative: a refund). */
  settle(units: number): void;
  /** The local share's slot came (Redis unreachable): serve the local waiters. */
  serveFallback(): void;
}

export class SharedRate {
  /** The rate Redis holds (the first process's, or `setSharedRate`'s), as of its last answer. */
  options: ResolvedRate;
  /** What this process asks for, as the scripts take it. */
  arg: string;
  #requested: ResolvedRate;
  #warned: string | undefined = undefined;
  #slotAt = 0;
  backlog = 0;
  shed = 0;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  #pending = 0;
  #flushing = false;
  /** The local share's timestamp while Redis is unreachable, and its sends ([at, cost]). */
  #localTat = Number.NEGATIVE_INFINITY;
  readonly #localSent: [number, number][] = [];
  #localTimer: ReturnType<typeof setTimeout> | undefined = undefined;

  constructor(
    rate: ResolvedRate,
    readonly name: string | undefined,
    private readonly now: () => number,
    private readonly hooks: SharedRateHooks,
  ) {
    this.options = rate;
    this.#requested = rate;
    this.arg = rateArg(rate);
  }

  /** A Redis answer: the rate's state, and the rate Redis holds (adopted, warned once if not ours). */
  answer(tail: RateTail): void {
    this.#slotAt = this.now() + tail.nextSlotMs;
    this.backlog = tail.backlog;
    if (tail.rate === '' || tail.rate === rateArg(this.options)) return;
    const stored = parseRate(tail.rate);
    if (stored === undefined) return;
    this.options = stored;
    if (tail.rate !== this.arg && this.#warned !== tail.rate) {
      this.#warned = tail.rate;
      const [l, p, b] = [stored.limit, stored.per, stored.burst];
      const mine = this.#requested;
      process.emitWarning(
        `shared gate ${JSON.stringify(this.name ?? '')}: Redis holds rate ${l} per ${p} ms (burst ${b}) for it, this process asked for ${mine.limit} per ${mine.per} ms (burst ${mine.burst}); gating by Redis's (change it for every process with setSharedRate(rate))`,
        { code: 'HOSTGATE_SHARED_RATE_MISMATCH' },
      );
    }
  }

  /** A grant read more than this after it was asked for is late (see {@link LATE_FLOOR_MS}). */
  get lateMs(): number {
    return Math.max(LATE_FLOOR_MS, this.options.per / this.options.limit);
  }

  /** `setSharedRate`: this process asks for `rate` from now on. */
  request(rate: ResolvedRate): void {
    this.#requested = rate;
    this.arg = rateArg(rate);
    this.options = rate;
  }

  /**
   * Our ticket is at the head with its permit free: claimed when its slot comes (`ms` from the
   * script's answer). One timer per gate: the newest hint names the head.
   */
  arm(hint: string): void {
    const at = hint.lastIndexOf('@');
    const id = hint.slice(0, at);
    const ms = Number(hint.slice(at + 1));
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    // Unref'd: the waiter's own deadline timer keeps the process alive while it waits.
    this.#timer = setTimeout(this.#fire, Math.max(1, ms), id);
    this.#timer.unref?.();
  }

  readonly #fire = (id: string): void => {
    this.#timer = undefined;
    this.hooks.slot(id);
  };

  /** A permit charged `charged` used `actual`: sent as one net correction per tick. */
  settle(charged: number, actual: number): void {
    this.#pending += actual - charged;
    if (this.#flushing) return;
    this.#flushing = true;
    queueMicrotask(() => {
      this.#flushing = false;
      const units = this.#pending;
      this.#pending = 0;
      if (units !== 0) this.hooks.settle(units);
    });
  }

  /** A caller refused at join: its slot after the cost queued ahead comes after its deadline. */
  refused(retryAfterMs: number): RateLimitedError {
    this.shed++;
    return new RateLimitedError(this.name, this.options, this.backlog, retryAfterMs);
  }

  stats(): RateStats {
    const { limit, per, burst } = this.options;
    return {
      limit,
      per,
      burst,
      nextSlotMs: Math.max(0, Math.ceil(this.#slotAt - this.now())),
      backlog: this.backlog,
      shedRateLimited: this.shed,
    };
  }

  /** Ms a caller arriving now waits for its slot behind the cost queued (0: none). */
  waitMs(): number {
    const interval = this.options.per / this.options.limit;
    const slot = this.#slotAt - this.now() + this.backlog * interval;
    return Math.max(0, Math.ceil(slot));
  }

  /**
   * While Redis is unreachable: may a call of `cost` go now on this process's share of the rate,
   * `1 / processes` of it (and of its burst, at least the call's own cost)? With every process
   * cut off the shares add up to the rate. Arms a timer for the slot when not.
   */
  takeLocal(cost: number, processes: number): boolean {
    const { limit, per, burst } = this.options;
    const share = Math.max(1, processes);
    const interval = (per * share) / limit;
    const reach = Math.max((Math.floor(burst / share) + 1) * interval, cost * interval);
    const now = this.now();
    const base = Math.max(this.#localTat, now);
    const wait = base - now + cost * interval - reach;
    if (wait > 0) {
      if (this.#localTimer === undefined) {
        this.#localTimer = setTimeout(() => {
          this.#localTimer = undefined;
          this.hooks.serveFallback();
        }, Math.ceil(wait));
        this.#localTimer.unref?.();
      }
      return false;
    }
    this.#localTat = base + cost * interval;
    this.#localSent.push([now, cost]);
    // Only sends within a window of now are ever charged (below): older ones go.
    while (this.#localSent.length > 0 && this.#localSent[0]![0] < now - per)
      this.#localSent.shift();
    return true;
  }

  /**
   * Redis answers again: the units let through locally within the last window are charged to
   * the rate in Redis (a debt the next calls wait out), so the return does not open a fresh
   * burst on top of them. Not the whole outage's: a call sent more than a window ago is in no
   * window that ends from now on, and charging it made the fleet wait out the outage again
   * (fault campaign seed 718, a replica's link slowed past its command timeout for 3.6 s: both
   * replicas at 0 for 1.9 s after it; a 3 s outage at 20 calls a second: 3 s).
   */
  storeUp(): void {
    const since = this.now() - this.options.per;
    let units = 0;
    for (const [at, cost] of this.#localSent) if (at >= since) units += cost;
    this.#localSent.length = 0;
    this.#localTat = Number.NEGATIVE_INFINITY;
    if (this.#localTimer !== undefined) clearTimeout(this.#localTimer);
    this.#localTimer = undefined;
    if (units > 0) this.settle(0, units);
  }

  close(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#localTimer !== undefined) clearTimeout(this.#localTimer);
    this.#timer = undefined;
    this.#localTimer = undefined;
  }
}
