/**
 * `Semaphore`: the counting gate (counting-gate.ts) as callers use it: its options, the
 * promise and callback calls (`acquire`, `run`, `tryAcquire`, `wait`), and the read side
 * (stats, histograms, holders).
 */
import { QueueClearedError } from '../common/errors.js';
import { durationMs, optionalSignal } from '../common/options.js';
import { checkCall } from './call-options.js';
import { CountingGate, coreEntry, type Held } from './counting-gate.js';
import {
  newPermit,
  type PermitOf,
  promiseFor,
  type RunFn,
  runGranted,
  runHeld,
  type WaitTargetOf,
  type WaitTicket,
} from './permit.js';
import type { ResolvedRate } from './rate.js';
import {
  type AcquireOptions,
  type DurationHistogramView,
  resolveSemaphoreOptions,
  type SemaphoreOptions,
  type SemaphoreStats,
  type TryAcquireOptions,
  type WaitOptions,
} from './semaphore-options.js';

export type { WaitTicket } from './permit.js';
export type { PermitTarget } from './permit-target.js';
export * from './semaphore-options.js';

/**
 * One granted slot of a gate. Release it exactly once — or bind it to a scope with
 * `using permit = await gate.acquire()`; a second `release()` is a counted no-op.
 * A type users hold, never a class they construct: only a gate grants permits.
 */
export interface Permit extends PermitOf<Semaphore> {}

/**
 * The receiving end of {@link Semaphore.wait}: told synchronously of its grant or rejection.
 * For integration layers on hot paths, where a promise, an AbortSignal and a listener per
 * waiter cost more than the request they guard.
 */
export interface WaitTarget extends WaitTargetOf<Permit> {}

/**
 * `run()`'s callback as its implementations see it: the overloads promise a present signal to
 * callers who passed one, and `undefined` may reach only callers who did not.
 */
export type RunCallback<T> = ((signal: AbortSignal) => T | PromiseLike<T>) &
  ((signal: AbortSignal | undefined) => T | PromiseLike<T>);

const ACQUIRE_KEYS = ['signal', 'timeout', 'weight', 'priority', 'cost'] as const;
const WAIT_KEYS = ['timeout', 'weight', 'priority', 'cost'] as const;
const TRY_KEYS = ['weight', 'priority', 'cost'] as const;

/**
 * A gate and a permit, kept for the life of the module: they hold the hidden classes (V8 maps)
 * of a gate, its queue, class, counters and collaborators, and of a permit (every waiter's too).
 * V8 reaches those maps from their constructors only through weak transitions, so once every
 * gate and permit has died (a HostLimiter that evicted its idle gates, a test, a benchmark
 * round), a full GC frees them and throws away every optimized function that embedded one; the
 * next gate runs unoptimized code until it is compiled again (issue 14).
 */
const mapAnchors: object[] = [];

/**
 * A counting semaphore with a bounded FIFO queue, wait deadlines, abort, and permits that
 * return exactly once.
 *
 * Invariant, at every instant: `held + available === limit` while `held <= limit`; every
 * granted permit is released exactly once. New arrivals never overtake waiters.
 *
 * @example
 * const gate = new Semaphore({ limit: 20, maxQueue: 200, queueTimeout: 250, name: 'db' });
 * const rows = await gate.run(() => db.query(sql), { signal: req.signal });
 */
export class Semaphore extends CountingGate {
  readonly #maxHold: number | undefined;
  readonly #maxHoldTotal: number | undefined;
  #leakWarnAfter: number | undefined;

  constructor(options: SemaphoreOptions) {
    const o = resolveSemaphoreOptions(options);
    super(o, options.priorities);
    this.#maxHold = o.maxHold;
    this.#maxHoldTotal = o.maxHoldTotal;
    this.#leakWarnAfter = o.leakWarnAfter;
    // maxHold measures time without progress per permit, and leakWarnAfter asks for it: both
    // need the clock readings an observer keeps. HostLimiter gates always have a maxHold.
    const bounded = o.maxHold !== undefined || o.maxHoldTotal !== undefined;
    if (o.observe || bounded || o.leakWarnAfter !== undefined) coreEntry.observe(this);
  }

  /** Longest a permit may go without progress (ms) before the gate takes it back. */
  get maxHold(): number | undefined {
    return this.#maxHold;
  }
  /** Longest a permit may be held at all (ms), progress or not; unset by default. */
  get maxHoldTotal(): number | undefined {
    return this.#maxHoldTotal;
  }
  /** Time without progress (ms) past which a permit is a leak suspect: the option, else `maxHold / 2`. */
  get leakWarnAfter(): number | undefined {
    return this.#leakWarnAfter ?? (this.#maxHold === undefined ? undefined : this.#maxHold / 2);
  }
  set leakWarnAfter(ms: number | undefined) {
    this.#leakWarnAfter = ms === undefined ? undefined : durationMs('leakWarnAfter', ms);
    if (ms !== undefined) coreEntry.observe(this);
  }
  /** Capture a stack per acquire into `permit.acquiredFrom` (a leak detector turns it on). */
  get traceAcquires(): boolean {
    return coreEntry.observer(this)?.traceAcquires ?? false;
  }
  set traceAcquires(on: boolean) {
    if (on === true) coreEntry.observe(this).traceAcquires = true;
    else {
      const observer = coreEntry.observer(this);
      if (observer !== undefined) observer.traceAcquires = false;
    }
  }
  /**
   * Whether the gate measures its permits (wait and hold histograms, progress, clock readings
   * on permits): from construction with `observe`, `maxHold`, `maxHoldTotal` or
   * `leakWarnAfter`, else from the first read of `stats()`, `waitTimes`, `holdTimes`,
   * `lastProgressAt`, or a leak detector. An unobserved gate reads no clock per permit.
   */
  get observed(): boolean {
    return coreEntry.observer(this) !== undefined;
  }
  /**
   * Clock (ms) of the holders' last sign of life: a grant, a release, or a permit's
   * `noteProgress()`. Exhausted and silent for long is a leak's signature. Observes the gate.
   */
  get lastProgressAt(): number {
    return coreEntry.observe(this).lastProgressAt;
  }
  /** Grant wait times (ms), read-only, since the gate was first observed (observes it). */
  get waitTimes(): DurationHistogramView {
    return coreEntry.observe(this).waitTimes;
  }
  /** Hold times (ms), read-only, since the gate was first observed (observes it). */
  get holdTimes(): DurationHistogramView {
    return coreEntry.observe(this).holdTimes;
  }
  /** Grant wait times (ms) of one priority class (a name from `priorities`). */
  waitTimesOf(priority: string): DurationHistogramView {
    const cls = coreEntry.parts(this).queue.classOf(priority);
    const observer = coreEntry.observe(this);
    return observer.classWaits[cls.index] ?? observer.waitTimes;
  }

  /**
   * Waits for a permit. Rejects with `QueueFullError` at once when the queue is full, with
   * `QueueTimeoutError` at the deadline, with `signal.reason` when the signal aborts, and with
   * a TypeError or RangeError for bad options (never throws).
   */
  acquire(options?: AcquireOptions): Promise<Permit> {
    return this.#acquire(options, true);
  }

  #acquire(options: AcquireOptions | undefined, guard: boolean, task?: RunFn): Promise<Permit> {
    let call: ReturnType<typeof checkCall<Held>> | undefined;
    let signal: AbortSignal | undefined;
    if (options !== undefined) {
      // A promise-returning method rejects, never throws: bad options included.
      try {
        const parts = coreEntry.parts(this);
        call = checkCall(this, parts.queue, parts.queueTimeout, 'acquire', options, ACQUIRE_KEYS);
        signal = optionalSignal('signal', options.signal);
      } catch (error) {
        return Promise.reject(error);
      }
      if (signal?.aborted) return Promise.reject(signal.reason);
    }
    const permit = coreEntry.take(this, call) as Permit | undefined;
    if (permit !== undefined) {
      if (task !== undefined) return runHeld(permit, task, signal) as Promise<never>;
      return Promise.resolve(permit);
    }
    const waiter = coreEntry.join(this, call, undefined, signal);
    if (waiter instanceof Error) return Promise.reject(waiter);
    const promise = promiseFor(waiter) as Promise<Permit>;
    waiter.task = task;
    // A queued task starts from a reaction chained here, in its caller's tick: it runs in the
    // caller's async context (AsyncLocalStorage), a microtask after the grant, never on the
    // stack of the release that granted it.
    if (task !== undefined) return promise.then(runGranted) as Promise<never>;
    if (signal === undefined || !guard) return promise;
    // Cancel vs grant in one tick (golang/go#63615): a grant whose signal fired before the
    // caller resumed goes straight back to the next waiter, and the caller sees the abort.
    return promise.then((permit) => {
      if (!signal.aborted) return permit;
      permit.release();
      throw signal.reason;
    });
  }

  /**
   * A permit of `weight` units (default 1), in priority class `priority` (default the first),
   * if they are free and nobody is waiting in any class (no barging); otherwise `undefined`.
   * Takes a weight, or `{ weight, priority }`. Throws a RangeError for a weight above the
   * limit, and a TypeError for an unknown class.
   */
  tryAcquire(options?: number | TryAcquireOptions): Permit | undefined {
    if (options === undefined) return coreEntry.take(this, undefined) as Permit | undefined;
    const parts = coreEntry.parts(this);
    const opts = typeof options === 'number' ? { weight: options } : options;
    const call = checkCall(this, parts.queue, parts.queueTimeout, 'tryAcquire', opts, TRY_KEYS);
    return coreEntry.take(this, call) as Permit | undefined;
  }

  /**
   * Callback form of {@link acquire} for integration layers: no promise and no AbortSignal.
   * The target hears synchronously — `granted` now if a permit is free, `rejected` now if the
   * queue is full — or later, when a permit frees or the deadline passes. Returns a ticket
   * to cancel while queued, or `undefined` when already settled. The second argument is the
   * wait deadline (ms) or `{ timeout, weight, priority }`.
   */
  wait(target: WaitTarget, options?: number | WaitOptions): WaitTicket | undefined {
    let call: ReturnType<typeof checkCall<Held>> | undefined;
    if (options !== undefined) {
      const parts = coreEntry.parts(this);
      const opts = typeof options === 'number' ? { timeout: options } : options;
      call = checkCall(this, parts.queue, parts.queueTimeout, 'wait', opts, WAIT_KEYS);
    }
    const permit = coreEntry.take(this, call);
    if (permit !== undefined) {
      target.granted(permit as unknown as Permit);
      return undefined;
    }
    const waiter = coreEntry.join(this, call, target as WaitTargetOf<unknown>, undefined);
    if (!(waiter instanceof Error)) return waiter;
    target.rejected(waiter);
    return undefined;
  }

  /**
   * Acquires, runs `fn`, and releases on every exit path. With a permit free, `fn` starts
   * synchronously inside `run()`. A queued `fn` starts one microtask after its permit is
   * granted, in the async context (AsyncLocalStorage) of its `run()` call, not in the
   * releaser's and not on its stack. The permit is returned when `fn` settles, not when the
   * signal aborts: `fn` gets the signal and should stop on it (typed as present when one is
   * passed).
   */
  run<T>(
    fn: (signal: AbortSignal) => T | PromiseLike<T>,
    options: AcquireOptions & { signal: AbortSignal },
  ): Promise<T>;
  run<T>(
    fn: (signal: AbortSignal | undefined) => T | PromiseLike<T>,
    options?: AcquireOptions,
  ): Promise<T>;
  run<T>(fn: RunCallback<T>, options?: AcquireOptions): Promise<T> {
    return this.#acquire(options, false, fn) as Promise<T>;
  }

  /** The gate's clock (ms): `performance.now()` unless `now` was injected. */
  now(): number {
    return coreEntry.parts(this).now();
  }

  /** An honest estimate (ms) of when a caller arriving now could be served. */
  retryAfterMs(): number {
    return coreEntry.retryAfter(this, coreEntry.parts(this).queue.size + 1);
  }

  /**
   * Resolves once nothing is held and nothing is queued: at once on an idle gate, else at the
   * release that empties it (p-queue's `onIdle()`). For batch work: `await gate.onIdle()`.
   */
  onIdle(): Promise<void> {
    return new Promise((resolve) => coreEntry.whenIdle(this, resolve));
  }

  /**
   * Takes every waiter out of the queue and rejects it with `reason` (default: a
   * `QueueClearedError`), as p-queue's `clear()`; permits already held are not touched. Counted
   * as `abortedWaiting`. Returns how many waiters were rejected.
   */
  clearQueue(reason?: unknown): number {
    const { queue, counts } = coreEntry.parts(this);
    const waiters: Held[] = [];
    for (const cls of queue.classes) {
      for (let waiter = cls.head; waiter !== undefined; waiter = cls.head) {
        coreEntry.dequeue(this, waiter);
        cls.abortedWaiting++;
        waiters.push(waiter);
      }
    }
    counts.abortedWaiting += waiters.length;
    // Rejected once all are out: a rejected WaitTarget may queue again, into an empty queue.
    for (const waiter of waiters) waiter.rejected(reason ?? new QueueClearedError(this.name));
    return waiters.length;
  }

  /** Permits held right now, least recently alive (granted or progressed) first. */
  holders(): Permit[] {
    const out: Permit[] = [];
    for (let p = coreEntry.parts(this).holders.oldest; p !== undefined; p = p.next) {
      out.push(p as unknown as Permit);
    }
    return out;
  }

  /**
   * Counters and levels, and the observer's wait and hold summaries: the first call observes
   * an unobserved gate, so `wait` and `hold` cover the permits since (see `observed`).
   */
  stats(): SemaphoreStats {
    const observer = coreEntry.observe(this);
    const { counts: c, queue, maxQueue, queueTimeout } = coreEntry.parts(this);
    return {
      name: this.name,
      limit: this.limit,
      held: this.held,
      available: this.available,
      queued: queue.size,
      maxQueue,
      queueTimeout,
      acquired: c.acquired,
      released: c.released,
      shedQueueFull: c.shedQueueFull,
      shedQueueTimeout: c.shedQueueTimeout,
      abortedWaiting: c.abortedWaiting,
      abortedInFlight: c.abortedInFlight,
      holdTimeouts: c.holdTimeouts,
      doubleReleases: c.doubleReleases,
      wait: observer.waitTimes.summary(),
      hold: observer.holdTimes.summary(),
      ...(observer.classWaits.length > 0 ? { priorities: queue.stats(observer.classWaits) } : {}),
      ...(this.rate === undefined ? {} : { rate: coreEntry.rateStats(this)! }),
    };
  }

  /**
   * @internal For gates whose permits come from elsewhere (`hostgate/redis`): one permit of
   * `weight` units now, outside the queue, with its wait recorded. The caller has checked
   * capacity its own way.
   */
  protected grantNow(waitedMs: number, weight = 1): Permit {
    // Such a gate reports its permits' hold times (a lost lease says how long it was held):
    // it is observed from its first grant.
    coreEntry.observe(this);
    return coreEntry.grant(this, waitedMs, weight) as Permit;
  }

  /**
   * @internal A leased shared gate's rate (`hostgate/redis`): the fleet's `rate` as Redis holds
   * it, and this process's share, `limit` whole calls per `rate.per` with `burst` (0: none now),
   * usable until `until` (the gate's clock).
   * Returns its demand: the cost units taken so far, those queued, and the calls that found no slot.
   */
  protected shareRate(share?: {
    rate: ResolvedRate;
    limit: number;
    burst: number;
    until: number;
    /** Ms from now before its first call (a share taken over from a process that closed). */
    holdMs?: number;
  }): {
    taken: number;
    backlog: number;
    throttled: number;
    /** Units the rate's TAT runs ahead of now (sent ahead of the pace). */
    lead: number;
    /** The same in ms. */
    leadMs: number;
  } {
    const rate = coreEntry.admission(this)?.rate;
    if (rate === undefined) return { taken: 0, backlog: 0, throttled: 0, lead: 0, leadMs: 0 };
    if (share !== undefined) {
      rate.share(share.rate, share.limit, share.burst, share.until, share.holdMs);
    }
    return {
      taken: rate.taken,
      backlog: rate.backlog,
      throttled: rate.throttled,
      lead: rate.lead(),
      leadMs: rate.leadMs(),
    };
  }

  static {
    // See mapAnchors: built directly, the permit never granted, so that no counter, histogram
    // or diagnostics channel sees either.
    const gate = new Semaphore({ limit: 1, observe: true });
    mapAnchors.push(gate, newPermit(coreEntry.parts(gate).queue.classes[0]!, Number.NaN, 1));
  }
}
