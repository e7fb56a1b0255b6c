/**
 * The counting gate: limit, held, weights, the queue discipline, grant and release, and the
 * invariant (the shape of Go's `x/sync/semaphore.Weighted`). Everything else is a collaborator
 * in a file of its own, called through a narrow interface, and built only when a gate needs it:
 * the queue (wait-queue.ts, queue-order.ts), its refusals (queue-sheds.ts), wait deadlines
 * (wait-deadlines.ts), hold bounds (hold-bounds.ts over holders.ts), a rate and the partner's
 * guard (admission.ts), observation (gate-observer.ts, clock.ts), diagnostics (gate-events.ts),
 * the Retry-After estimate (retry-estimate.ts) and `onIdle()` callers (idle-waiters.ts).
 * `Semaphore` (semaphore.ts) is this gate with its options and the read side: stats,
 * histograms, holders, idle waits. The class stays within 300 lines (test/gate/shape.test.ts).
 */
import type { ShedError } from '../common/errors.js';
import { positiveInteger } from '../common/options.js';
import { Admission, settleCost } from './admission.js';
import { type Call, tooHeavy } from './call-options.js';
import { cachedPlatformNow, platformNow } from './clock.js';
import { GateCounts } from './gate-counts.js';
import {
  captureAcquireSite,
  channels,
  publishAcquire,
  publishDoubleRelease,
  publishRelease,
  publishWaitAborted,
  type ReleaseReason,
} from './gate-events.js';
import type { GateGuard } from './gate-guard.js';
import { GateObserver } from './gate-observer.js';
import { HoldBounds } from './hold-bounds.js';
import { Holders } from './holders.js';
import { IdleWaiters } from './idle-waiters.js';
import type { OutcomeHandlers } from './outcome-handler.js';
import {
  type GatePermit,
  gateEntry,
  newPermit,
  newWaiter,
  type PermitOf,
  permitEntry,
  type WaitTargetOf,
} from './permit.js';
import { nextWaiter } from './queue-order.js';
import { QueueSheds } from './queue-sheds.js';
import type { RateOptions, RateStats, ResolvedRate } from './rate.js';
import { oldestHoldAge, retryAfterEstimate } from './retry-estimate.js';
import type { ResolvedSemaphoreOptions } from './semaphore-options.js';
import { WaitDeadlines } from './wait-deadlines.js';
import { type PriorityClassOptions, type QueueClass, WaitQueue } from './wait-queue.js';

/** The gate's view of its permits and waiters (one object each: permit.ts). */
export type Held = GatePermit<CountingGate>;
type Permit = PermitOf<CountingGate>;
type Cls = QueueClass<Held>;

const { acquire: acquireChannel, release: releaseChannel } = channels;
/** Whether a subscriber wants permits' timestamps (acquire and release messages carry times). */
const timestamped = (): boolean => acquireChannel.hasSubscribers || releaseChannel.hasSubscribers;
/** What `Semaphore` reads of its core: references fixed at construction, but `outcomes`. */
export interface GateParts {
  readonly queue: WaitQueue<Held>;
  readonly holders: Holders;
  readonly counts: GateCounts;
  readonly maxQueue: number;
  readonly queueTimeout: number;
  /** The gate's clock (ms), read afresh. */
  readonly now: () => number;
  /** Who hears its permits' outcomes (outcomes.ts): set by layers above, not at construction. */
  outcomes: OutcomeHandlers;
}

/** What joining the queue gives: the waiter, or the error it is refused with (full queue). */
export type Joined = Held | ShedError;

/** `Semaphore`'s way into the core's private state, bound in the static block below. */
export const coreEntry = {
  parts: undefined as unknown as (gate: CountingGate) => GateParts,
  /** The observer, attached on first use: permits already held are stamped with the time now. */
  observe: undefined as unknown as (gate: CountingGate) => GateObserver,
  observer: undefined as unknown as (gate: CountingGate) => GateObserver | undefined,
  /** A permit now if the units are free and nobody waits (no barging), else `undefined`. */
  take: undefined as unknown as (
    gate: CountingGate,
    call: Call<Held> | undefined,
  ) => Held | undefined,
  /** Queues a new waiter (`target`'s or a promise's, set by the caller), or refuses. */
  join: undefined as unknown as (
    gate: CountingGate,
    call: Call<Held> | undefined,
    target: WaitTargetOf<Permit> | undefined,
    signal: AbortSignal | undefined,
  ) => Joined,
  /** One permit of `weight` units outside the queue (`grantNow`). */
  grant: undefined as unknown as (gate: CountingGate, waitedMs: number, weight: number) => Permit,
  /** Takes a waiter out of the queue without settling it. */
  dequeue: undefined as unknown as (gate: CountingGate, waiter: Held) => void,
  /** The Retry-After estimate for a caller at `position` in the queue. */
  retryAfter: undefined as unknown as (gate: CountingGate, position: number) => number,
  /** The rate's state, when the gate has a `rate`. */
  rateStats: undefined as unknown as (gate: CountingGate) => RateStats | undefined,
  /** The clock for timestamps (cached per synchronous stretch unless the clock is injected). */
  clock: undefined as unknown as (gate: CountingGate) => number,
  /** Calls `resolve` once nothing is held or queued: now, or at the release that gets there. */
  whenIdle: undefined as unknown as (gate: CountingGate, resolve: () => void) => void,
  /** Sets (or clears) the gate's guard (gate-guard.ts): holds and refusals from above. */
  guard: undefined as unknown as (gate: CountingGate, guard: GateGuard | undefined) => void,
  /** The gate's guard, if one is set. */
  guardOf: undefined as unknown as (gate: CountingGate) => GateGuard | undefined,
  /** The gate's rate and guard (admission.ts); `create`: made if it has none yet. */
  admission: undefined as unknown as (
    gate: CountingGate,
    create?: boolean,
  ) => Admission<Held> | undefined,
};

export class CountingGate {
  #limit: number;
  /**
   * What grants may fill: `limit`, or less while a subclass sets a ceiling (a leased shared
   * gate's block of the cap, which may be 0 and never rejects a waiter heavier than it).
   */
  #grantable: number;
  #ceiling = Number.POSITIVE_INFINITY;
  /** Units granted and not yet back: `held + available === limit` while `held <= limit`. */
  #held = 0;
  /** Waiters, by priority class (one class unless `priorities` is set). */
  readonly #queue: WaitQueue<Held>;
  readonly #holders = new Holders();
  readonly #counts = new GateCounts();
  readonly #deadlines: WaitDeadlines;
  /** Refusals: a full queue, a passed wait deadline (queue-sheds.ts). */
  readonly #sheds: QueueSheds<CountingGate>;
  readonly #bounds: HoldBounds | undefined;
  /** A rate and the partner's guard (admission.ts): only on gates with either. */
  #admission: Admission<Held> | undefined = undefined;
  /** Histograms, hold estimate, progress clock, acquire sites: absent until someone looks. */
  #observer: GateObserver | undefined = undefined;
  readonly #name: string | undefined;
  /** Adaptive LIFO's standing-queue age (ms); `undefined`: FIFO (queue-order.ts). */
  readonly #lifoAfter: number | undefined;
  readonly #now: () => number;
  readonly #cacheClock: boolean;
  #draining = false;
  readonly #idle = new IdleWaiters();
  readonly #parts: GateParts;

  static {
    // The permits' way in (permit.ts) and Semaphore's: `#private` stays private to the gate.
    type Gate = CountingGate;
    gateEntry.release = (gate, p, reason) => (gate as Gate).#release(p as Held, reason);
    coreEntry.clock = (gate) => gate.#clock();
    gateEntry.abort = (gate, waiter, reason) => (gate as Gate).#abort(waiter as Held, reason);
    gateEntry.expire = (gate, waiter) => (gate as Gate).#expire(waiter as Held);
    coreEntry.admission = (gate, create) => (create ? gate.#admitting() : gate.#admission);
    gateEntry.settleCost = (gate, p, actual) => (gate as Gate).settlePermitCost(p, actual);
    gateEntry.costOf = (gate, p) => (gate as Gate).permitCost(p);
    coreEntry.parts = (gate) => gate.#parts;
    coreEntry.observe = (gate) =>
      (gate.#observer ??= GateObserver.attach(gate.#now(), gate.#queue.classes, gate.#holders));
    coreEntry.observer = (gate) => gate.#observer;
    coreEntry.grant = (gate, ms, weight) =>
      gate.#grant(ms, gate.#stamp(), weight, gate.#queue.classes[0]!);
    coreEntry.take = (gate, call) => gate.#take(call);
    coreEntry.join = (gate, call, target, signal) => gate.#join(call, target, signal);
    coreEntry.dequeue = (gate, waiter) => gate.#dequeue(waiter);
    coreEntry.whenIdle = (gate, resolve) =>
      gate.#idle.add(resolve, gate.#held === 0 && gate.#queue.size === 0);
  }

  constructor(o: ResolvedSemaphoreOptions, priorities: PriorityClassOptions[] | undefined) {
    this.#limit = o.limit;
    this.#grantable = o.limit;
    this.#name = o.name;
    this.#now = o.now ?? platformNow;
    this.#cacheClock = o.now === undefined;
    this.#lifoAfter = o.lifoAfter;
    this.#queue = new WaitQueue(this, priorities, o.maxQueue);
    const expire = (waiter: GatePermit): void => this.#expire(waiter as Held);
    this.#deadlines = new WaitDeadlines(o.queueTimeout, this.#queue, this.#now, expire);
    const [queue, holders, counts, now] = [this.#queue, this.#holders, this.#counts, this.#now];
    this.#parts = { ...o, now, queue, holders, counts, outcomes: undefined };
    this.#sheds = new QueueSheds<CountingGate>(this, this.#parts, {
      observe: () => void coreEntry.observe(this),
      retryAfter: (position) => coreEntry.retryAfter(this, position),
      dequeue: (waiter) => this.#dequeue(waiter),
      clock: () => this.#clock(),
    });
    if (o.maxHold !== undefined || o.maxHoldTotal !== undefined) {
      const takeBack = (p: GatePermit): void => this.#release(p as Held, 'hold_timeout');
      this.#bounds = new HoldBounds(o.maxHold, o.maxHoldTotal, this, this.#parts, takeBack);
    }
    if (o.rate !== undefined) this.#admitting(o.rate);
  }

  /**
   * @internal `permit.settleCost(actual)` (a refund may let the head go now) and `permit.cost`,
   * against the gate's rate: a gate whose rate lives elsewhere (in Redis) overrides both.
   */
  protected settlePermitCost(permit: object, actual: number): void {
    settleCost(this.#admission, this.#name, permit, actual);
  }
  protected permitCost(permit: object): number {
    return this.#admission?.rate?.costOf(permit) ?? 1;
  }

  #admitting(rate?: ResolvedRate): Admission<Held> {
    const [clock, serve] = [() => this.#clock(), () => this.#drain()];
    this.#admission ??= new Admission(this, rate, this.#now, clock, serve);
    return this.#admission;
  }

  get name(): string | undefined {
    return this.#name;
  }
  get limit(): number {
    return this.#limit;
  }
  get held(): number {
    return this.#held;
  }
  get available(): number {
    return this.#held < this.#grantable ? this.#grantable - this.#held : 0;
  }
  /** @internal Units waiting (weights summed). */
  protected get queuedWeight(): number {
    return this.#queue.weight;
  }

  /**
   * @internal Grants stay within `min(limit, ceiling)` (an integer ≥ 0, or Infinity) for a gate
   * whose room comes from elsewhere (a leased block). Lowering takes nothing back; raising grants.
   */
  protected setCeiling(ceiling: number): void {
    this.#ceiling = ceiling;
    this.#grantable = Math.min(this.#limit, ceiling);
    this.#drain();
  }
  get queued(): number {
    return this.#queue.size;
  }
  /** The request rate (`limit`, `per`, `burst`, defaults filled in), when the gate has one. */
  get rate(): Readonly<Required<RateOptions>> | undefined {
    return this.#admission?.rate?.options;
  }
  /** The ways into the gate, for Semaphore's calls (coreEntry): a permit now, or a place in the queue. */
  #take(call: Call<Held> | undefined): Held | undefined {
    const weight = call?.weight ?? 1;
    if (this.#queue.size > 0 || this.#held + weight > this.#grantable) return undefined;
    const admission = this.#admission;
    if (admission !== undefined && !admission.takeNow(call?.cost ?? 1)) return undefined;
    const permit = this.#grant(0, this.#stamp(), weight, call?.cls ?? this.#queue.classes[0]!);
    admission?.charged(permit, call?.cost ?? 1);
    return permit;
  }

  #join(call: Call<Held> | undefined, target?: WaitTargetOf<Permit>, signal?: AbortSignal): Joined {
    const cls = call?.cls ?? this.#queue.classes[0]!;
    const admission = this.#admission;
    const cost = call?.cost ?? 1;
    // No closure per call: one per queued call cost 40% of the steady benchmark's throughput.
    const timeout = call?.timeout ?? this.#parts.queueTimeout;
    const refused =
      admission === undefined
        ? this.#sheds.admit(cls)
        : admission.refuse(cost, timeout, cls, this.#sheds);
    if (refused !== undefined) return refused;
    const waiter: Held = newWaiter(target, signal, this.#clock(), cls, call?.weight ?? 1);
    if (this.#observer?.traceAcquires) waiter.acquiredFrom = captureAcquireSite();
    this.#deadlines.add(waiter, call);
    this.#queue.push(waiter);
    signal?.addEventListener('abort', waiter, { once: true });
    // Refused the fast path with room free (a hold, a probe): served later, never on this stack.
    admission?.queued(waiter, cost, this.#held < this.#grantable);
    return waiter;
  }

  /**
   * Changes the limit at run time. Growing grants to waiters at once; shrinking grants nothing
   * new until `held < limit`, and rejects (RangeError) the waiters that can no longer fit.
   */
  setLimit(limit: number): void {
    this.#limit = positiveInteger('limit', limit);
    this.#grantable = Math.min(this.#limit, this.#ceiling);
    for (const waiter of this.#queue.heavierThan(limit)) {
      this.#dequeue(waiter);
      waiter.rejected(tooHeavy(waiter.weight, limit, this.#name));
    }
    this.#drain();
  }

  /** @internal Runs once per permit that went back (any reason), before waiters are served. */
  protected released(_permit: Permit, _reason: ReleaseReason): void {}

  /** The clock for timestamps: cached per synchronous stretch (clock.ts); an injected one never. */
  #clock(): number {
    return this.#cacheClock ? cachedPlatformNow() : this.#now();
  }

  /** A permit's timestamp: the clock when someone measures permits, else `NaN` (no read). */
  #stamp(): number {
    return this.#observer !== undefined || timestamped() ? this.#clock() : Number.NaN;
  }

  /** `now`: from `#stamp()` (NaN: unmeasured). `waiter`: the one served (none: immediate). */
  #grant(waitedMs: number, now: number, weight: number, cls: Cls, waiter?: Held): Held {
    this.#held += weight;
    this.#counts.acquired++;
    cls.acquired++;
    let permit: Held;
    if (waiter === undefined) permit = newPermit(cls, now, weight);
    else {
      permit = waiter;
      permitEntry.activate(waiter, now);
    }
    this.#holders.link(permit);
    // maxHold and maxHoldTotal attach the observer at construction: a gate without one has
    // nothing more to do for a grant than count it.
    const observer = this.#observer;
    if (observer !== undefined) {
      observer.granted(waitedMs, now, cls.index);
      if (observer.traceAcquires) permit.acquiredFrom ??= captureAcquireSite();
      this.#bounds?.granted(permit);
    }
    if (acquireChannel.hasSubscribers) publishAcquire(this, permit, waitedMs, cls.name);
    return permit;
  }

  /** Called by the permit once it marked itself released: its state is checked there. */
  #release(permit: Held, how: ReleaseReason): void {
    this.#holders.unlink(permit);
    this.#held -= permit.weight;
    const counts = this.#counts;
    counts.released++;
    const reason = this.#bounds === undefined ? how : this.#bounds.released(permit, how);
    if (reason === 'aborted') counts.abortedInFlight++;
    let now: number | undefined;
    const observer = this.#observer;
    if (observer !== undefined || releaseChannel.hasSubscribers) {
      now = this.#clock();
      const heldMs = now - permit.acquiredAt;
      observer?.released(heldMs, now);
      if (releaseChannel.hasSubscribers) publishRelease(this, permit, heldMs, reason);
    }
    this.released(permit, reason);
    this.#drain(now);
    this.#idle.released(this.#held, this.#queue.size);
  }

  /** A holder's request made progress: it moves to the young end of the holders list. */
  /**
   * Grants to waiters, oldest first (newest first under adaptive LIFO), while permits are free.
   * A WaitTarget runs inside this loop and may release (and so drain) again: the inner call
   * returns at once and this loop picks up its work (no stack growth).
   */
  #drain(now?: number): void {
    if (this.#draining) return;
    this.#draining = true;
    try {
      const queue = this.#queue;
      const admission = this.#admission;
      // The partner's hold: a timer serves the queue at its end.
      if (admission !== undefined && queue.size > 0 && !admission.open()) return;
      // One class (every gate without priorities): no class to pick, no share to charge.
      const single = queue.classes.length === 1 ? queue.classes[0]! : undefined;
      while (queue.size > 0 && this.#held < this.#grantable) {
        const cls = single ?? queue.next()!;
        let waiter = cls.head!;
        if (this.#lifoAfter !== undefined) {
          now ??= this.#clock();
          waiter = nextWaiter(waiter, cls.tail!, now, this.#lifoAfter);
        }
        // In weight units: a heavy waiter waits for room, and nobody behind overtakes it.
        if (this.#held + waiter.weight > this.#grantable) break;
        // Its rate slot at the same point: not come yet, the rate's timer serves it then.
        if (admission !== undefined && !admission.takeHead(waiter)) break;
        this.#dequeue(waiter);
        if (single === undefined) queue.charge(cls, waiter.weight);
        // One timestamp serves every grant of this pass (and the release that started it).
        now ??= this.#stamp();
        waiter.granted(this.#grant(now - waiter.enqueuedAt, now, waiter.weight, cls, waiter));
      }
    } finally {
      this.#draining = false;
    }
  }

  /** Takes a waiter out of every list and detaches its signal and timer. */
  #dequeue(waiter: Held): void {
    waiter.queued = false;
    this.#queue.remove(waiter);
    this.#deadlines.remove(waiter);
    waiter.signal?.removeEventListener('abort', waiter);
    this.#admission?.left(waiter, this.#queue.size === 0);
  }

  #abort(waiter: Held, reason: unknown): void {
    if (!waiter.queued) return;
    this.#dequeue(waiter);
    this.#counts.abortedWaiting++;
    waiter.cls.abortedWaiting++;
    if (channels.waitAborted.hasSubscribers) publishWaitAborted(this, reason);
    waiter.rejected(reason);
    // A cancelled head must never strand a free permit (golang/sync#10).
    this.#drain();
  }

  #expire(waiter: Held): void {
    if (!waiter.queued) return;
    this.#dequeue(waiter);
    this.#sheds.expired(waiter);
    // A heavy head leaving on its deadline lets lighter waiters behind it through.
    this.#drain();
  }
}

// Ways in that need no private state: a double release (counted, published), the Retry-After
// estimate, and the rate's and the guard's (permit.ts, Semaphore, the partner rules), through the
// gate's Admission.
gateEntry.doubleRelease = (gate, permit) => {
  coreEntry.parts(gate as CountingGate).counts.doubleReleases++;
  if (channels.doubleRelease.hasSubscribers) publishDoubleRelease(gate as CountingGate, permit);
};
/** A holder's request made progress: it moves to the young end of the holders list. */
gateEntry.progress = (gate, permit) => {
  const g = gate as CountingGate;
  // Permits that report progress carry requests: observed from the first, a stall is seen.
  const observer = coreEntry.observe(g);
  permit.aliveAt = observer.lastProgressAt = coreEntry.clock(g);
  coreEntry.parts(g).holders.touch(permit);
};
coreEntry.retryAfter = (gate, position) => {
  const hold = coreEntry.observer(gate)?.holdEstimate;
  const { queueTimeout, holders, now } = coreEntry.parts(gate);
  const age = hold === undefined ? oldestHoldAge(holders, now()) : 0;
  const ms = retryAfterEstimate(position, gate.limit, hold, queueTimeout, age);
  // The partner's own "not before" and the rate's next slot: nobody is served earlier.
  const admission = coreEntry.admission(gate);
  return admission === undefined ? ms : Math.max(ms, admission.waitFloorMs());
};
coreEntry.rateStats = (gate) => coreEntry.admission(gate)?.rate?.stats();
coreEntry.guard = (gate, guard) => {
  coreEntry.admission(gate, true)!.guard = guard;
};
coreEntry.guardOf = (gate) => coreEntry.admission(gate)?.guard;
