/**
 * The counting gate: limit, held, weights, the queue discipline, grant and release, and the
 * invariant (the shape of Go's `x/sync/semaphore.Weighted`). Everything else is a collaborator
 * in a file of its own, called through a narrow interface, and built only when a gate needs it:
 * wait deadlines (wait-deadlines.ts), hold bounds (hold-bounds.ts over holders.ts),
 * observation (gate-observer.ts, clock.ts), diagnostics (gate-events.ts) and the Retry-After
 * estimate (retry-estimate.ts). `Semaphore` (semaphore.ts) is this gate with its options and
 * the read side: stats, histograms, holders, idle waits.
 */
import { QueueFullError, QueueTimeoutError, type ShedError } from '../common/errors.js';
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
  publishShed,
  publishWaitAborted,
  type ReleaseReason,
} from './gate-events.js';
import type { GateGuard } from './gate-guard.js';
import { GateObserver } from './gate-observer.js';
import { HoldBounds } from './hold-bounds.js';
import { Holders } from './holders.js';
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
import type { RateOptions, RateStats, ResolvedRate } from './rate.js';
import { retryAfterEstimate } from './retry-estimate.js';
import type { ResolvedSemaphoreOptions } from './semaphore-options.js';
import { WaitDeadlines } from './wait-deadlines.js';
import { type PriorityClassOptions, type QueueClass, WaitQueue } from './wait-queue.js';

/** The gate's view of its permits and waiters (one object each: permit.ts). */
export type Held = GatePermit<CountingGate>;
type Permit = PermitOf<CountingGate>;
type Cls = QueueClass<Held>;

const { acquire: acquireChannel, release: releaseChannel, shed: shedChannel } = channels;
/** Whether a subscriber wants permits' timestamps (acquire and release messages carry times). */
const timestamped = (): boolean => acquireChannel.hasSubscribers || releaseChannel.hasSubscribers;
/** What `Semaphore` reads of its core: references fixed at construction. */
export interface GateParts {
  readonly queue: WaitQueue<Held>;
  readonly holders: Holders;
  readonly counts: GateCounts;
  readonly maxQueue: number;
  readonly queueTimeout: number;
  /** The gate's clock (ms), read afresh. */
  readonly now: () => number;
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
  /** Calls `resolve` once nothing is held or queued: now, or at the release that gets there. */
  whenIdle: undefined as unknown as (gate: CountingGate, resolve: () => void) => void,
  /** Sets (or clears) the gate's guard (gate-guard.ts): holds and refusals from above. */
  guard: undefined as unknown as (gate: CountingGate, guard: GateGuard | undefined) => void,
  /** The gate's guard, if one is set. */
  guardOf: undefined as unknown as (gate: CountingGate) => GateGuard | undefined,
};

export class CountingGate {
  #limit: number;
  /**
   * What grants may fill: `limit`, or less while a subclass sets a ceiling (a leased shared
   * gate's block of the cap, which may be 0 and never rejects a waiter heavier than it).
   */
  #grantable: number;
  #ceiling = Number.POSITIVE_INFINITY;
  /** Units waiting in the queue (a leased gate's demand). */
  #queuedWeight = 0;
  /** Units granted and not yet back: `held + available === limit` while `held <= limit`. */
  #held = 0;
  /** Waiters, by priority class (one class unless `priorities` is set). */
  readonly #queue: WaitQueue<Held>;
  readonly #holders = new Holders();
  readonly #counts = new GateCounts();
  readonly #deadlines: WaitDeadlines;
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
  /** `onIdle()` callers, until nothing is held or queued. */
  #idle: (() => void)[] | undefined = undefined;
  readonly #parts: GateParts;

  static {
    // The permits' way in (permit.ts) and Semaphore's: `#private` stays private to the gate.
    type Gate = CountingGate;
    gateEntry.release = (gate, p, reason) => (gate as Gate).#release(p as Held, reason);
    gateEntry.doubleRelease = (gate, p) => (gate as Gate).#doubleRelease(p as Held);
    gateEntry.progress = (gate, p) => (gate as Gate).#progress(p as Held);
    gateEntry.abort = (gate, waiter, reason) => (gate as Gate).#abort(waiter as Held, reason);
    gateEntry.expire = (gate, waiter) => (gate as Gate).#expire(waiter as Held);
    gateEntry.settleCost = (gate, p, actual) => (gate as Gate).settlePermitCost(p, actual);
    gateEntry.costOf = (gate, p) => (gate as Gate).permitCost(p);
    coreEntry.rateStats = (gate) => gate.#admission?.rate?.stats();
    coreEntry.parts = (gate) => gate.#parts;
    coreEntry.observe = (gate) =>
      (gate.#observer ??= GateObserver.attach(gate.#now(), gate.#queue.classes, gate.#holders));
    coreEntry.observer = (gate) => gate.#observer;
    coreEntry.grant = (gate, ms, weight) =>
      gate.#grant(ms, gate.#stamp(), weight, gate.#queue.classes[0]!);
    coreEntry.take = (gate, call) => gate.#take(call);
    coreEntry.join = (gate, call, target, signal) => gate.#join(call, target, signal);
    coreEntry.dequeue = (gate, waiter) => gate.#dequeue(waiter);
    coreEntry.retryAfter = (gate, position) => gate.#retryAfter(position);
    coreEntry.whenIdle = (gate, resolve) => {
      if (gate.#held === 0 && gate.#queue.size === 0) resolve();
      else if (gate.#idle === undefined) gate.#idle = [resolve];
      else gate.#idle.push(resolve);
    };
    coreEntry.guard = (gate, guard) => {
      gate.#admitting().guard = guard;
    };
    coreEntry.guardOf = (gate) => gate.#admission?.guard;
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
    this.#parts = { ...o, now, queue, holders, counts };
    if (o.maxHold !== undefined || o.maxHoldTotal !== undefined) {
      const takeBack = (p: GatePermit): void => this.#release(p as Held, 'hold_timeout');
      this.#bounds = new HoldBounds(o.maxHold, o.maxHoldTotal, this, this.#parts, takeBack);
    }
    if (o.rate !== undefined) this.#admitting(o.rate);
  }

  /**
   * @internal `permit.settleCost(actual)`: the gate's rate corrected (a refund may let the head
   * go now). A gate whose rate lives elsewhere (a shared gate's, in Redis) overrides it.
   */
  protected settlePermitCost(permit: object, actual: number): void {
    if (settleCost(this.#admission, this.#name, permit, actual)) this.#drain();
  }

  /** @internal `permit.cost`: what the permit was charged against the rate. */
  protected permitCost(permit: object): number {
    return this.#admission?.rate?.costOf(permit) ?? 1;
  }

  #admitting(rate?: ResolvedRate): Admission<Held> {
    if (this.#admission !== undefined) return this.#admission;
    const serve = (): void => this.#drain();
    const clock = (): number => this.#clock();
    this.#admission = new Admission(this, rate, this.#now, clock, serve);
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
    return this.#queuedWeight;
  }

  /**
   * @internal Grants stay within `min(limit, ceiling)` (a non-negative integer, or Infinity):
   * for gates whose room comes from elsewhere (a leased block of a shared cap). Lowering it
   * takes nothing back; raising it grants to waiters at once.
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
    const timeout = call?.timeout ?? this.#parts.queueTimeout;
    const cost = call?.cost ?? 1;
    const admit = (): QueueFullError | undefined => this.#admit(cls);
    const refused =
      admission === undefined
        ? this.#admit(cls)
        : admission.refuse(cost, timeout, this.#queue.size, cls.name, admit);
    if (refused !== undefined) return refused;
    const waiter: Held = newWaiter(target, signal, this.#clock(), cls, call?.weight ?? 1);
    if (this.#observer?.traceAcquires) waiter.acquiredFrom = captureAcquireSite();
    this.#deadlines.add(waiter, call);
    this.#queue.push(waiter);
    this.#queuedWeight += waiter.weight;
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
    for (const cls of this.#queue.classes) {
      for (let waiter = cls.head; waiter !== undefined; ) {
        const next = waiter.next;
        if (waiter.weight > limit) {
          this.#dequeue(waiter);
          waiter.rejected(tooHeavy(waiter.weight, limit, this.#name));
        }
        waiter = next;
      }
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

  #retryAfter(position: number): number {
    const hold = this.#observer?.holdEstimate;
    const { queueTimeout, maxQueue } = this.#parts;
    const ms = retryAfterEstimate(position, this.#limit, hold, queueTimeout, maxQueue);
    // The partner's own "not before" and the rate's next slot: nobody is served earlier.
    return this.#admission === undefined ? ms : Math.max(ms, this.#admission.waitFloorMs());
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
    let reason = how;
    const bounds = this.#bounds;
    if (bounds !== undefined) {
      bounds.released(permit);
      // The holder aborting from inside the maxHold hook is the take-back, not a client abort.
      if (permit === bounds.expiring) reason = 'hold_timeout';
    }
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
    if (this.#idle !== undefined && this.#held === 0 && this.#queue.size === 0) {
      const idle = this.#idle;
      this.#idle = undefined;
      for (const resolve of idle) resolve();
    }
  }

  #doubleRelease(permit: Held): void {
    this.#counts.doubleReleases++;
    if (channels.doubleRelease.hasSubscribers) publishDoubleRelease(this, permit);
  }

  /** A holder's request made progress: it moves to the young end of the holders list. */
  #progress(permit: Held): void {
    // Permits that report progress carry requests: observed from the first, a stall is seen.
    const observer = coreEntry.observe(this);
    permit.aliveAt = observer.lastProgressAt = this.#clock();
    this.#holders.touch(permit);
  }

  /**
   * Room in the queue for a waiter of `cls`: `undefined` when there is (after shedding the
   * newest waiter of a lower class if the gate's queue is full), else the error to refuse with.
   */
  #admit(cls: Cls): QueueFullError | undefined {
    const maxQueue = this.#parts.maxQueue;
    if (cls.queued >= cls.maxQueue) return this.#queueFull(cls, cls.maxQueue);
    if (this.#queue.size < maxQueue) return undefined;
    const victim = this.#queue.victimFor(cls);
    if (victim === undefined) return this.#queueFull(cls, maxQueue);
    this.#dequeue(victim);
    victim.rejected(this.#queueFull(victim.cls, maxQueue));
    return undefined;
  }

  /** `bound`: the gate's `maxQueue` or a class's own. A gate that sheds measures from now on. */
  #queueFull(cls: Cls, bound: number): QueueFullError {
    this.#counts.shedQueueFull++;
    cls.shedQueueFull++;
    coreEntry.observe(this);
    const queued = this.#queue.size;
    const option =
      bound === this.#parts.maxQueue ? 'maxQueue' : `priorities[${cls.index}].maxQueue`;
    const retryAfterMs = this.#retryAfter(queued + 1);
    const error = new QueueFullError(this.#name, queued, retryAfterMs, { option, value: bound });
    if (shedChannel.hasSubscribers) publishShed(this, 'queue_full', error, queued, cls.name);
    return error;
  }

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
    this.#queuedWeight -= waiter.weight;
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
    this.#counts.shedQueueTimeout++;
    waiter.cls.shedQueueTimeout++;
    coreEntry.observe(this);
    const waited = this.#clock() - waiter.enqueuedAt;
    const queued = this.#queue.size;
    const error = new QueueTimeoutError(this.#name, waited, this.#retryAfter(queued + 1));
    if (shedChannel.hasSubscribers)
      publishShed(this, 'queue_timeout', error, queued, waiter.cls.name);
    waiter.rejected(error);
    // A heavy head leaving on its deadline lets lighter waiters behind it through.
    this.#drain();
  }
}
