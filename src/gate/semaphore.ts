import { PermitHoldTimeoutError, QueueFullError, QueueTimeoutError } from '../common/errors.js';
import {
  checkKnownKeys,
  checkObject,
  durationMs,
  nonNegativeInteger,
  optionalSignal,
  optionalString,
  positiveInteger,
} from '../common/options.js';
import { captureAcquireSite, channels, type ReleaseReason } from './diagnostics.js';
import { GateObserver } from './gate-observer.js';

import {
  EXPIRED,
  type GatePermit,
  gateEntry,
  newPermit,
  newWaiter,
  onWaiterTimer,
  type Permit,
  permitEntry,
  promiseFor,
  RELEASED,
  type RunFn,
  runGranted,
  runHeld,
  type Waiter,
  type WaitTarget,
  type WaitTicket,
} from './permit.js';
import { nextWaiter, parseQueueOrder } from './queue-order.js';
import {
  type AcquireOptions,
  DEFAULT_QUEUE_PER_PERMIT,
  DEFAULT_QUEUE_TIMEOUT_MS,
  type DurationHistogramView,
  MAX_RETRY_AFTER_MS,
  type SemaphoreOptions,
  type SemaphoreStats,
  type TryAcquireOptions,
  type WaitOptions,
} from './semaphore-options.js';
import { DEFAULT_CLASS, type QueueClass, WaitQueue } from './wait-queue.js';

export type { Permit, WaitTarget, WaitTicket } from './permit.js';
export type { PermitTarget } from './permit-target.js';
export * from './semaphore-options.js';

const SEMAPHORE_KEYS = [
  'limit',
  'maxQueue',
  'queueTimeout',
  'maxHold',
  'maxHoldTotal',
  'name',
  'leakWarnAfter',
  'now',
  'queueOrder',
  'lifoAfter',
  'priorities',
  'observe',
] as const;
const {
  acquire: acquireChannel,
  release: releaseChannel,
  shed: shedChannel,
  waitAborted: waitAbortedChannel,
  holdTimeout: holdTimeoutChannel,
  doubleRelease: doubleReleaseChannel,
} = channels;
const ACQUIRE_KEYS = ['signal', 'timeout', 'weight', 'priority'] as const;
const WAIT_KEYS = ['timeout', 'weight', 'priority'] as const;
const TRY_KEYS = ['weight', 'priority'] as const;

/** The gate's counters: plain integers, kept whether or not anything observes the gate. */
class GateCounts {
  acquired = 0;
  released = 0;
  shedQueueFull = 0;
  shedQueueTimeout = 0;
  abortedWaiting = 0;
  abortedInFlight = 0;
  holdTimeouts = 0;
  doubleReleases = 0;
}

/**
 * `run()`'s callback as its implementations see it: the overloads promise a present signal to
 * callers who passed one, and `undefined` may reach only callers who did not.
 */
export type RunCallback<T> = ((signal: AbortSignal) => T | PromiseLike<T>) &
  ((signal: AbortSignal | undefined) => T | PromiseLike<T>);

/** The platform's performance object: fake timers replace the global one. */
const REAL_PERFORMANCE = globalThis.performance;
/**
 * Schedules the clock cache's reset: a reaction to a settled promise is a microtask like
 * `queueMicrotask`'s, but on Node 20 queueMicrotask also builds an AsyncResource and a bound
 * function per call (about 80 ns against 35 ns), and an HTTP request misses the cache about
 * twice (its response, its next dispatch).
 */
const SETTLED = Promise.resolve();

/**
 * The platform clock as gates read it for their own timestamps (see `#clock`): one reading per
 * synchronous stretch of work, shared by every gate on that clock, forgotten at the next
 * microtask checkpoint.
 */
let cachedNow: number | undefined;
const forgetNow = (): void => {
  cachedNow = undefined;
};

/**
 * A gate and a permit, kept for the life of the module: they hold the hidden classes (V8 maps)
 * of a gate, its queue, class, counters and observer, and of a permit (every waiter's too).
 * V8 reaches those maps from their constructors only through weak transitions, so once every
 * gate and permit has died (a HostLimiter that evicted its idle gates, a test, a benchmark
 * round), a full GC frees them and throws away every optimized function that embedded one; the
 * next gate runs unoptimized code until it is compiled again (issue 14: the benchmark's fresh
 * gate per round re-optimized all of the gate's hot functions each round).
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
export class Semaphore {
  #limit: number;
  readonly #maxQueue: number;
  readonly #queueTimeout: number;
  readonly #maxHold: number | undefined;
  readonly #maxHoldTotal: number | undefined;
  readonly #name: string | undefined;
  readonly #now: () => number;
  /** Adaptive LIFO's standing-queue age (ms); `undefined`: FIFO (queue-order.ts). */
  readonly #lifoAfter: number | undefined;

  #held = 0;
  /** Waiters, by priority class (one class unless `priorities` is set). */
  readonly #queue: WaitQueue;
  // Waiters with the gate's own deadline, in FIFO order, when the gate keeps this list
  // (`#deadlineList`): their deadlines are monotonic, so one timer at its head serves them all.
  #dHead: Waiter | undefined = undefined;
  #dTail: Waiter | undefined = undefined;
  #deadlineTimer: ReturnType<typeof setTimeout> | undefined = undefined;
  /**
   * Whether the deadline list above is kept. A one-class gate whose waiters all have the gate's
   * own deadline needs none: its queue is in arrival order, so it is in deadline order, and one
   * timer at the queue's head serves them all (two stores into the gate fewer per queued call).
   * The first waiter with a deadline of its own builds the list (and a gate with priority
   * classes keeps one); the list is dropped again whenever the queue empties.
   */
  #deadlineList: boolean;
  // Holders by `aliveAt` (grant or last progress), least recent first: with one maxHold per
  // gate their no-progress deadlines are monotonic, so one timer at the head serves them all.
  #oldest: GatePermit | undefined = undefined;
  #newest: GatePermit | undefined = undefined;
  #holdTimer: ReturnType<typeof setTimeout> | undefined = undefined;
  readonly #counts = new GateCounts();
  #draining = false;
  #leakWarnAfter: number | undefined;
  /** Histograms, hold estimate, progress clock, acquire sites: absent until someone looks. */
  #observer: GateObserver | undefined = undefined;
  readonly #cacheClock: boolean;
  /** The permit a maxHold take-back is returning: its holder's own release counts as that. */
  #expiring: GatePermit | undefined = undefined;

  static {
    gateEntry.release = (gate, permit, reason) => gate.#release(permit, reason);
    gateEntry.doubleRelease = (gate, permit) => gate.#doubleRelease(permit);
    gateEntry.progress = (gate, permit) => gate.#progress(permit);
    gateEntry.abort = (gate, waiter, reason) => gate.#abort(waiter, reason);
    gateEntry.expire = (gate, waiter) => gate.#expire(waiter);
  }

  constructor(options: SemaphoreOptions) {
    checkObject('Semaphore options', options);
    checkKnownKeys('Semaphore', options, SEMAPHORE_KEYS);
    this.#limit = positiveInteger('limit', options.limit);
    this.#maxQueue =
      options.maxQueue === undefined
        ? this.#limit * DEFAULT_QUEUE_PER_PERMIT
        : nonNegativeInteger('maxQueue', options.maxQueue);
    this.#queueTimeout =
      options.queueTimeout === undefined
        ? DEFAULT_QUEUE_TIMEOUT_MS
        : durationMs('queueTimeout', options.queueTimeout);
    this.#maxHold =
      options.maxHold === undefined ? undefined : durationMs('maxHold', options.maxHold);
    this.#maxHoldTotal =
      options.maxHoldTotal === undefined
        ? undefined
        : durationMs('maxHoldTotal', options.maxHoldTotal);
    this.#name = optionalString('name', options.name);
    this.#leakWarnAfter =
      options.leakWarnAfter === undefined
        ? undefined
        : durationMs('leakWarnAfter', options.leakWarnAfter);
    if (options.now !== undefined && typeof options.now !== 'function') {
      throw new TypeError('now must be a function returning milliseconds');
    }
    // The global, looked up per call: fake timers (vitest, sinon) replace globalThis.performance,
    // and the clock must run on the same time as the setTimeout deadlines it is compared with.
    this.#now = options.now ?? (() => performance.now());
    this.#cacheClock = options.now === undefined;
    this.#lifoAfter = parseQueueOrder(options.queueOrder, options.lifoAfter);
    this.#queue = new WaitQueue(this, options.priorities, this.#maxQueue);
    this.#deadlineList = this.#queue.classes.length > 1;
    if (options.observe !== undefined && typeof options.observe !== 'boolean') {
      throw new TypeError(`observe must be a boolean, got ${typeof options.observe}`);
    }
    // maxHold measures time without progress per permit, and leakWarnAfter asks for it: both
    // need the clock readings an observer keeps. HostLimiter gates always have a maxHold.
    if (
      options.observe === true ||
      this.#maxHold !== undefined ||
      this.#maxHoldTotal !== undefined ||
      this.#leakWarnAfter !== undefined
    ) {
      this.#observe();
    }
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
    return this.#held < this.#limit ? this.#limit - this.#held : 0;
  }
  get queued(): number {
    return this.#queue.size;
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
    if (ms !== undefined) this.#observe();
  }

  /** Capture a stack per acquire into `permit.acquiredFrom` (a leak detector turns it on). */
  get traceAcquires(): boolean {
    return this.#observer?.traceAcquires ?? false;
  }
  set traceAcquires(on: boolean) {
    if (on === true) this.#observe().traceAcquires = true;
    else if (this.#observer !== undefined) this.#observer.traceAcquires = false;
  }

  /**
   * Whether the gate measures its permits (wait and hold histograms, progress, clock readings
   * on permits): from construction with `observe`, `maxHold`, `maxHoldTotal` or
   * `leakWarnAfter`, else from the first read of `stats()`, `waitTimes`, `holdTimes`,
   * `lastProgressAt`, or a leak detector. An unobserved gate reads no clock per permit.
   */
  get observed(): boolean {
    return this.#observer !== undefined;
  }

  /**
   * Clock (ms) of the holders' last sign of life: a grant, a release, or a permit's
   * `noteProgress()` (response headers or bytes). Exhausted and silent for long is a leak's
   * signature. Observes the gate (from now on) if it was not yet.
   */
  get lastProgressAt(): number {
    return this.#observe().lastProgressAt;
  }

  /**
   * Grant wait times (ms) as a histogram, read-only: exporters read `cumulative()` from it.
   * Covers the grants since the gate was first observed.
   */
  get waitTimes(): DurationHistogramView {
    return this.#observe().waitTimes;
  }

  /** Hold times (ms) as a histogram, read-only; since the gate was first observed. */
  get holdTimes(): DurationHistogramView {
    return this.#observe().holdTimes;
  }

  /** Grant wait times (ms) of one priority class (a name from `priorities`). */
  waitTimesOf(priority: string): DurationHistogramView {
    const cls = this.#queue.classOf(priority);
    return this.#observe().classWaits[cls.index] ?? this.#observe().waitTimes;
  }

  /** Attaches the observer (once): permits already held are stamped with the time now. */
  #observe(): GateObserver {
    let observer = this.#observer;
    if (observer === undefined) {
      const now = this.#now();
      const classes = this.#queue.classes;
      const named = classes.length > 1 || classes[0]!.name !== DEFAULT_CLASS;
      observer = new GateObserver(now, named ? classes.length : 0);
      this.#observer = observer;
      for (let p = this.#oldest; p !== undefined; p = p.next) {
        if (Number.isNaN(p.acquiredAt)) p.acquiredAt = p.aliveAt = now;
      }
    }
    return observer;
  }

  /** A permit's timestamp: the clock when someone measures permits, else `NaN` (no read). */
  #stamp(): number {
    return this.#observer !== undefined ||
      acquireChannel.hasSubscribers ||
      releaseChannel.hasSubscribers
      ? this.#clock()
      : Number.NaN;
  }

  /** The gate's clock (ms): `performance.now()` unless `now` was injected. */
  now(): number {
    return this.#now();
  }

  /**
   * The clock for the gate's own timestamps, read at most once per synchronous stretch of
   * work (until the next microtask checkpoint), like nginx's cached time per event-loop
   * iteration: a burst of 100,000 calls reads it once, not 100,000 times. Each timestamp is
   * the time its stretch began, so it is never late, and timers read the clock afresh.
   */
  #clock(): number {
    // An injected clock may jump within a stretch: never cached.
    if (!this.#cacheClock) return this.#now();
    let now = cachedNow;
    if (now === undefined) {
      // Nor is fake timers' performance: checked only on a miss (the global is an accessor).
      if (globalThis.performance !== REAL_PERFORMANCE) return this.#now();
      // The platform's clock, read straight.
      now = REAL_PERFORMANCE.now();
      cachedNow = now;
      void SETTLED.then(forgetNow);
    }
    return now;
  }

  /**
   * Waits for a permit. Rejects with `QueueFullError` at once when the queue is full, with
   * `QueueTimeoutError` at the deadline, and with `signal.reason` when the signal aborts.
   */
  acquire(options?: AcquireOptions): Promise<Permit> {
    return this.#acquire(options, true);
  }

  #acquire(
    options: AcquireOptions | undefined,
    guardSignal: boolean,
    task?: RunFn,
  ): Promise<Permit> {
    let signal: AbortSignal | undefined;
    let timeout = this.#queueTimeout;
    let ownDeadline = false;
    let weight = 1;
    let cls = this.#queue.classes[0]!;
    if (options !== undefined) {
      checkObject('acquire options', options);
      checkKnownKeys('acquire', options, ACQUIRE_KEYS);
      signal = optionalSignal('signal', options.signal);
      if (options.priority !== undefined) cls = this.#queue.classOf(options.priority);
      if (options.timeout !== undefined && options.timeout !== this.#queueTimeout) {
        timeout = durationMs('timeout', options.timeout);
        ownDeadline = true;
      } else if (cls.queueTimeout !== undefined) {
        timeout = cls.queueTimeout;
        ownDeadline = timeout !== this.#queueTimeout;
      }
      if (options.weight !== undefined) weight = this.#weight(options.weight);
      if (signal?.aborted) return Promise.reject(signal.reason);
    }
    if (this.#queue.size === 0 && this.#held + weight <= this.#limit) {
      const permit = this.#grant(0, this.#stamp(), weight, cls);
      if (task !== undefined) return runHeld(permit, task, signal) as Promise<never>;
      return Promise.resolve(permit);
    }
    const refused = this.#admit(cls);
    if (refused !== undefined) return Promise.reject(refused);
    const waiter = newWaiter(undefined, signal, this.#clock(), cls, weight);
    const promise = promiseFor(waiter);
    waiter.task = task;
    if (this.#observer?.traceAcquires) waiter.acquiredFrom = captureAcquireSite();
    this.#enqueue(waiter, ownDeadline, timeout);
    // A queued task starts from a reaction chained here, in its caller's tick: it runs in the
    // caller's async context (AsyncLocalStorage), a microtask after the grant, never on the
    // stack of the release that granted it.
    if (task !== undefined) return promise.then(runGranted) as Promise<never>;
    if (signal === undefined || !guardSignal) return promise;
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
    let weight = 1;
    let cls = this.#queue.classes[0]!;
    if (typeof options === 'number') weight = this.#weight(options);
    else if (options !== undefined) {
      checkObject('tryAcquire options', options);
      checkKnownKeys('tryAcquire', options, TRY_KEYS);
      if (options.weight !== undefined) weight = this.#weight(options.weight);
      if (options.priority !== undefined) cls = this.#queue.classOf(options.priority);
    }
    if (this.#queue.size === 0 && this.#held + weight <= this.#limit) {
      return this.#grant(0, this.#stamp(), weight, cls);
    }
    return undefined;
  }

  /**
   * Callback form of {@link acquire} for integration layers: no promise and no AbortSignal.
   * The target hears synchronously — `granted` now if a permit is free, `rejected` now if the
   * queue is full — or later, when a permit frees or the deadline passes. Returns a ticket
   * to cancel while queued, or `undefined` when already settled. The second argument is the
   * wait deadline (ms) or `{ timeout, weight }`.
   */
  wait(target: WaitTarget, options?: number | WaitOptions): WaitTicket | undefined {
    let timeout: number | undefined;
    let weight = 1;
    let cls = this.#queue.classes[0]!;
    if (typeof options === 'number') timeout = options;
    else if (options !== undefined) {
      checkObject('wait options', options);
      checkKnownKeys('wait', options, WAIT_KEYS);
      timeout = options.timeout;
      if (options.weight !== undefined) weight = this.#weight(options.weight);
      if (options.priority !== undefined) cls = this.#queue.classOf(options.priority);
    }
    if (this.#queue.size === 0 && this.#held + weight <= this.#limit) {
      target.granted(this.#grant(0, this.#stamp(), weight, cls));
      return undefined;
    }
    const refused = this.#admit(cls);
    if (refused !== undefined) {
      target.rejected(refused);
      return undefined;
    }
    timeout ??= cls.queueTimeout;
    const ownDeadline = timeout !== undefined && timeout !== this.#queueTimeout;
    const wait = ownDeadline ? durationMs('timeout', timeout) : this.#queueTimeout;
    const waiter = newWaiter(target, undefined, this.#clock(), cls, weight);
    if (this.#observer?.traceAcquires) waiter.acquiredFrom = captureAcquireSite();
    this.#enqueue(waiter, ownDeadline, wait);
    return waiter;
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

  /**
   * Changes the limit at run time. Growing grants to waiters at once; shrinking grants
   * nothing new until `held < limit`, and rejects (RangeError) the waiters whose weight no
   * longer fits at all.
   */
  setLimit(limit: number): void {
    this.#limit = positiveInteger('limit', limit);
    for (const cls of this.#queue.classes) {
      for (let waiter = cls.head; waiter !== undefined; ) {
        const next = waiter.next;
        if (waiter.weight > limit) {
          this.#dequeue(waiter);
          waiter.rejected(this.#tooHeavy(waiter.weight));
        }
        waiter = next;
      }
    }
    this.#drain();
  }

  #weight(value: unknown): number {
    const weight = positiveInteger('weight', value);
    if (weight > this.#limit) throw this.#tooHeavy(weight);
    return weight;
  }

  #tooHeavy(weight: number): RangeError {
    return new RangeError(
      `weight ${weight} exceeds the limit ${this.#limit} of ${this.#name ?? 'this gate'}: it could never be granted`,
    );
  }

  /** Permits held right now, least recently alive (granted or progressed) first. */
  holders(): Permit[] {
    const out: Permit[] = [];
    for (let p = this.#oldest; p !== undefined; p = p.next) out.push(p);
    return out;
  }

  /** An honest estimate (ms) of when a caller arriving now could be served. */
  retryAfterMs(): number {
    return this.#retryAfter(this.#queue.size + 1);
  }

  /**
   * Counters and levels, and the observer's wait and hold summaries: the first call observes
   * an unobserved gate, so `wait` and `hold` cover the permits since (see `observed`).
   */
  stats(): SemaphoreStats {
    const observer = this.#observe();
    const c = this.#counts;
    return {
      name: this.#name,
      limit: this.#limit,
      held: this.#held,
      available: this.available,
      queued: this.#queue.size,
      maxQueue: this.#maxQueue,
      queueTimeout: this.#queueTimeout,
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
      ...(observer.classWaits.length > 0
        ? { priorities: this.#queue.stats(observer.classWaits) }
        : {}),
    };
  }

  /**
   * @internal For gates whose permits come from elsewhere (`hostgate/redis`): one permit now,
   * outside the queue, with its wait recorded. The caller has checked capacity its own way.
   */
  protected grantNow(waitedMs: number): Permit {
    // Such a gate reports its permits' hold times (a lost lease says how long it was held):
    // it is observed from its first grant.
    this.#observe();
    return this.#grant(waitedMs, this.#stamp(), 1, this.#queue.classes[0]!);
  }

  /** @internal Runs once per permit that went back (any reason), before waiters are served. */
  protected released(_permit: Permit, _reason: ReleaseReason): void {}

  /**
   * `now`: a timestamp from `#stamp()` (NaN while nothing measures permits). `waiter`: the
   * dequeued waiter this grant serves, which becomes the permit; none for an immediate grant.
   */
  #grant(waitedMs: number, now: number, weight: number, cls: QueueClass, waiter?: Waiter): Permit {
    this.#held += weight;
    this.#counts.acquired++;
    cls.acquired++;
    let permit: GatePermit;
    if (waiter === undefined) permit = newPermit(cls, now, weight);
    else {
      permit = waiter;
      permitEntry.activate(waiter, now);
    }
    this.#linkNewest(permit);
    // maxHold and maxHoldTotal attach the observer at construction: a gate without one has
    // nothing more to do for a grant than count it.
    const observer = this.#observer;
    if (observer !== undefined) this.#measureGrant(observer, permit, waitedMs, now, cls);
    if (acquireChannel.hasSubscribers) {
      acquireChannel.publish({
        gate: this,
        partner: this.#name,
        permit,
        waitedMs,
        priority: cls.name,
      });
    }
    return permit;
  }

  /** The observer's and the hold limits' share of a grant, off the plain gate's path. */
  #measureGrant(
    observer: GateObserver,
    permit: GatePermit,
    waitedMs: number,
    now: number,
    cls: QueueClass,
  ): void {
    observer.granted(waitedMs, now, cls.index);
    if (observer.traceAcquires) permit.acquiredFrom ??= captureAcquireSite();
    if (this.#maxHold !== undefined && this.#holdTimer === undefined) {
      this.#armHoldTimer(this.#maxHold);
    }
    if (this.#maxHoldTotal !== undefined) {
      permit.totalTimer = setTimeout(this.#onTotalTimer, this.#maxHoldTotal, permit);
      permit.totalTimer.unref?.();
    }
  }

  /** Called by the permit once it marked itself released: its state is checked there. */
  #release(permit: GatePermit, how: ReleaseReason): void {
    this.#unlinkHolder(permit);
    if (permit.totalTimer !== undefined) clearTimeout(permit.totalTimer);
    this.#held -= permit.weight;
    this.#counts.released++;
    // The holder aborting from inside the maxHold hook is the take-back, not a client abort.
    const reason = permit === this.#expiring ? 'hold_timeout' : how;
    if (reason === 'aborted') this.#counts.abortedInFlight++;
    let now: number | undefined;
    const observer = this.#observer;
    if (observer !== undefined || releaseChannel.hasSubscribers) {
      now = this.#clock();
      const heldMs = now - permit.acquiredAt;
      observer?.released(heldMs, now);
      if (releaseChannel.hasSubscribers) {
        releaseChannel.publish({ gate: this, partner: this.#name, permit, heldMs, reason });
      }
    }
    this.released(permit, reason);
    this.#drain(now);
  }

  #doubleRelease(permit: GatePermit): void {
    this.#counts.doubleReleases++;
    if (doubleReleaseChannel.hasSubscribers) {
      doubleReleaseChannel.publish({ gate: this, partner: this.#name, permit });
    }
  }

  /** A holder's request made progress: it moves to the young end of the holders list. */
  #progress(permit: GatePermit): void {
    // Permits that report progress carry requests (the HTTP layers note headers and bytes):
    // such a gate is observed from the first report, so a stall is seen from there on.
    const observer = this.#observer ?? this.#observe();
    const now = this.#clock();
    permit.aliveAt = now;
    observer.lastProgressAt = now;
    if (this.#newest === permit) return;
    this.#unlinkHolder(permit);
    this.#linkNewest(permit);
  }

  #linkNewest(permit: GatePermit): void {
    const newest = this.#newest;
    if (newest === undefined) {
      this.#oldest = permit;
    } else {
      newest.next = permit;
      permit.prev = newest;
    }
    this.#newest = permit;
  }

  /**
   * Room in the queue for a waiter of `cls`: `undefined` when there is (after shedding the
   * newest waiter of a lower class if the gate's queue is full), else the error to refuse with.
   */
  #admit(cls: QueueClass): QueueFullError | undefined {
    if (cls.queued >= cls.maxQueue) return this.#queueFull(cls);
    if (this.#queue.size < this.#maxQueue) return undefined;
    const victim = this.#queue.victimFor(cls);
    if (victim === undefined) return this.#queueFull(cls);
    this.#dequeue(victim);
    victim.rejected(this.#queueFull(victim.cls));
    return undefined;
  }

  #queueFull(cls: QueueClass): QueueFullError {
    this.#counts.shedQueueFull++;
    // A gate that sheds is loaded: from now on it measures hold times for honest hints.
    this.#observe();
    cls.shedQueueFull++;
    const queued = this.#queue.size;
    const error = new QueueFullError(this.#name, queued, this.#retryAfter(queued + 1));
    if (shedChannel.hasSubscribers) {
      shedChannel.publish({
        gate: this,
        partner: this.#name,
        reason: 'queue_full',
        error,
        queued,
        priority: cls.name,
      });
    }
    return error;
  }

  #unlinkHolder(permit: GatePermit): void {
    const { prev, next } = permit;
    if (prev === undefined) this.#oldest = next;
    else prev.next = next;
    if (next === undefined) this.#newest = prev;
    else next.prev = prev;
    permit.prev = permit.next = undefined;
  }

  /**
   * Grants to waiters, oldest first (newest first under adaptive LIFO), while permits are free. A WaitTarget runs inside this
   * loop and may release (and so drain) again: the inner call returns at once and this loop
   * picks up its work, so a chain of synchronous failures cannot grow the stack.
   */
  #drain(now?: number): void {
    if (this.#draining) return;
    this.#draining = true;
    try {
      const queue = this.#queue;
      // One class (every gate without priorities): no class to pick, no share to charge.
      const single = queue.classes.length === 1 ? queue.classes[0]! : undefined;
      while (queue.size > 0 && this.#held < this.#limit) {
        const cls = single ?? queue.next()!;
        let waiter = cls.head!;
        if (this.#lifoAfter !== undefined) {
          now ??= this.#clock();
          waiter = nextWaiter(waiter, cls.tail!, now, this.#lifoAfter);
        }
        // In weight units: a heavy waiter waits for room, and nobody behind overtakes it.
        if (this.#held + waiter.weight > this.#limit) break;
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

  #enqueue(waiter: Waiter, ownDeadline: boolean, timeout: number): void {
    if (ownDeadline) {
      if (!this.#deadlineList) this.#buildDeadlineList();
      this.#queue.push(waiter);
      waiter.timer = setTimeout(onWaiterTimer, timeout, waiter);
    } else {
      this.#queue.push(waiter);
      if (this.#deadlineList) {
        const dTail = this.#dTail;
        if (dTail === undefined) this.#dHead = waiter;
        else {
          dTail.dNext = waiter;
          waiter.dPrev = dTail;
        }
        this.#dTail = waiter;
      }
      if (this.#deadlineTimer === undefined) this.#armDeadlineTimer(timeout);
    }
    waiter.signal?.addEventListener('abort', waiter, { once: true });
  }

  /** A waiter with a deadline of its own joins a one-class gate: list the others' deadlines. */
  #buildDeadlineList(): void {
    this.#deadlineList = true;
    let dTail: Waiter | undefined;
    for (let waiter = this.#queue.classes[0]!.head; waiter !== undefined; waiter = waiter.next) {
      if (dTail === undefined) this.#dHead = waiter;
      else {
        dTail.dNext = waiter;
        waiter.dPrev = dTail;
      }
      dTail = waiter;
    }
    this.#dTail = dTail;
  }

  /** Takes a waiter out of every list and detaches its signal and timer. */
  #dequeue(waiter: Waiter): void {
    waiter.queued = false;
    const queue = this.#queue;
    queue.remove(waiter);
    if (waiter.timer !== undefined) {
      clearTimeout(waiter.timer);
      waiter.timer = undefined;
    } else if (this.#deadlineList) {
      const { dPrev, dNext } = waiter;
      if (dPrev === undefined) this.#dHead = dNext;
      else dPrev.dNext = dNext;
      if (dNext === undefined) this.#dTail = dPrev;
      else dNext.dPrev = dPrev;
      waiter.dPrev = waiter.dNext = undefined;
      if (this.#dHead === undefined) this.#stopDeadlineTimer();
    } else if (queue.size === 0) {
      this.#stopDeadlineTimer();
    }
    // An empty one-class queue has no deadlines to list: the next waiters go without the list.
    if (queue.size === 0 && queue.classes.length === 1) this.#deadlineList = false;
    waiter.signal?.removeEventListener('abort', waiter);
  }

  #stopDeadlineTimer(): void {
    if (this.#deadlineTimer !== undefined) {
      clearTimeout(this.#deadlineTimer);
      this.#deadlineTimer = undefined;
    }
  }

  #abort(waiter: Waiter, reason: unknown): void {
    if (!waiter.queued) return;
    this.#dequeue(waiter);
    this.#counts.abortedWaiting++;
    waiter.cls.abortedWaiting++;
    if (waitAbortedChannel.hasSubscribers) {
      waitAbortedChannel.publish({ gate: this, partner: this.#name, reason });
    }
    waiter.rejected(reason);
    // A cancelled head must never strand a free permit (golang/sync#10).
    this.#drain();
  }

  #expire(waiter: Waiter): void {
    if (!waiter.queued) return;
    this.#dequeue(waiter);
    this.#counts.shedQueueTimeout++;
    this.#observe();
    waiter.cls.shedQueueTimeout++;
    const waited = this.#clock() - waiter.enqueuedAt;
    const queued = this.#queue.size;
    const error = new QueueTimeoutError(this.#name, waited, this.#retryAfter(queued + 1));
    if (shedChannel.hasSubscribers) {
      shedChannel.publish({
        gate: this,
        partner: this.#name,
        reason: 'queue_timeout',
        error,
        queued,
        priority: waiter.cls.name,
      });
    }
    waiter.rejected(error);
    // A heavy head leaving on its deadline lets lighter waiters behind it through.
    this.#drain();
  }

  #armDeadlineTimer(delayMs: number): void {
    this.#deadlineTimer = setTimeout(this.#onDeadlineTimer, Math.max(1, Math.ceil(delayMs)));
  }

  readonly #onDeadlineTimer = (): void => {
    this.#deadlineTimer = undefined;
    const now = this.#now();
    // Only waiters with the gate's own timeout count here: deadline = enqueuedAt + it.
    const timeout = this.#queueTimeout;
    let head = this.#deadlineHead();
    while (head !== undefined && head.enqueuedAt + timeout <= now) {
      this.#expire(head);
      head = this.#deadlineHead();
    }
    // A waiter queued from inside an expiry armed a timer for its own deadline: the head's
    // comes first.
    this.#stopDeadlineTimer();
    if (head !== undefined) this.#armDeadlineTimer(head.enqueuedAt + timeout - now);
  };

  /** The waiter whose gate deadline comes first: the list's head, or a one-class queue's. */
  #deadlineHead(): Waiter | undefined {
    return this.#deadlineList ? this.#dHead : this.#queue.classes[0]!.head;
  }

  #armHoldTimer(delayMs: number): void {
    // Unref'd: a held permit belongs to work that keeps the process alive by itself.
    this.#holdTimer = setTimeout(this.#onHoldTimer, Math.max(1, Math.ceil(delayMs)));
    this.#holdTimer.unref?.();
  }

  readonly #onHoldTimer = (): void => {
    this.#holdTimer = undefined;
    const maxHold = this.#maxHold!;
    const now = this.#now();
    let oldest = this.#oldest;
    while (oldest !== undefined && oldest.aliveAt + maxHold <= now) {
      this.#takeBack(oldest, now - oldest.acquiredAt, now - oldest.aliveAt);
      oldest = this.#oldest;
    }
    if (oldest !== undefined) {
      // A take-back may have granted to a waiter (or the hook acquired), arming the timer for
      // that new permit; the least recently alive holder expires first.
      if (this.#holdTimer !== undefined) clearTimeout(this.#holdTimer);
      this.#armHoldTimer(oldest.aliveAt + maxHold - now);
    }
  };

  readonly #onTotalTimer = (permit: GatePermit): void => {
    permit.totalTimer = undefined;
    if (permitEntry.isHeld(permit)) this.#takeBack(permit, this.#now() - permit.acquiredAt);
  };

  /** maxHold (or maxHoldTotal) passed: tell the holder to stop, then take the slot back. */
  #takeBack(permit: GatePermit, heldMs: number, quietMs?: number): void {
    this.#counts.holdTimeouts++;
    const hook = permit.onHoldTimeout;
    permit.onHoldTimeout = undefined;
    this.#expiring = permit;
    if (hook !== undefined || holdTimeoutChannel.hasSubscribers) {
      const error = new PermitHoldTimeoutError(this.#name, heldMs, quietMs);
      if (holdTimeoutChannel.hasSubscribers) {
        holdTimeoutChannel.publish({ gate: this, partner: this.#name, permit, heldMs, error });
      }
      try {
        hook?.(error);
      } catch {
        // The permit comes back regardless; a throwing hook must not strand it.
      }
    }
    if (permitEntry.isHeld(permit)) {
      permitEntry.settle(permit, RELEASED);
      this.#release(permit, 'hold_timeout');
    }
    // Released by the hook or here: either way the holder's later release() is no double release.
    permitEntry.settle(permit, EXPIRED);
    this.#expiring = undefined;
  }

  #retryAfter(position: number): number {
    // Unobserved: no hold times measured, so the wait deadline stands in for one.
    const hold = this.#observer?.holdEstimate ?? this.#queueTimeout;
    const ms = Math.ceil((position / this.#limit) * hold);
    return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, ms));
  }

  static {
    // See mapAnchors: built directly, the permit never granted, so that no counter, histogram
    // or diagnostics channel sees either.
    const gate = new Semaphore({ limit: 1, observe: true });
    mapAnchors.push(gate, newPermit(gate.#queue.classes[0]!, Number.NaN, 1));
  }
}
