/**
 * A gate's permits and waiters: what a Semaphore hands out and what it keeps in its queue.
 * Generic in the gate's type `G` so that this file need not import the gate: semaphore.ts binds
 * `G` to `Semaphore` (its `Permit` and `WaitTarget`).
 */

import type { PermitHoldTimeoutError } from '../common/errors.js';
import type { AcquireSite, ReleaseReason } from './gate-events.js';
import { type PermitRequestInfo, type PermitTarget, permitTarget } from './permit-target.js';
import type { QueueClass } from './wait-queue.js';

export const HELD = 0;
export const RELEASED = 1;
export const EXPIRED = 2;
/** A {@link Waiter} not granted yet: not a permit to its holder until the gate activates it. */
export const WAITING = 3;

/**
 * The gate's internal entry points, bound by Semaphore's static block so that its #private
 * state stays private while GatePermit and Waiter, here, can still reach it.
 */
export const gateEntry = {
  release: undefined as unknown as (gate: unknown, permit: Waiter, reason: ReleaseReason) => void,
  doubleRelease: undefined as unknown as (gate: unknown, permit: Waiter) => void,
  progress: undefined as unknown as (gate: unknown, permit: Waiter) => void,
  abort: undefined as unknown as (gate: unknown, waiter: Waiter, reason: unknown) => void,
  expire: undefined as unknown as (gate: unknown, waiter: Waiter) => void,
  settleCost: undefined as unknown as (gate: unknown, permit: Waiter, actual: number) => void,
  costOf: undefined as unknown as (gate: unknown, permit: Waiter) => number,
};

/** Only a gate holds this: `new` on a permit's constructor from anywhere else throws. */
export const GRANT: unique symbol = Symbol('hostgate.grant');

/**
 * One granted slot of a gate. Release it exactly once — or bind it to a scope with
 * `using permit = await gate.acquire()`; a second `release()` is a counted no-op.
 * A type users hold, never a class they construct: only a gate grants permits.
 */
export interface PermitOf<G> extends Disposable {
  /** The gate this permit belongs to. */
  readonly gate: G;
  /**
   * Clock reading (ms) when the permit was granted; `NaN` on a gate that reads no clock per
   * permit (unobserved, no `maxHold`), until the gate is first observed (then: that moment).
   */
  readonly acquiredAt: number;
  /** Clock reading (ms) at the grant or the last `noteProgress()`; `NaN` like `acquiredAt`. */
  readonly aliveAt: number;
  /** Units of the gate's limit this permit holds (1 unless acquired with a `weight`). */
  readonly weight: number;
  /** Units of the gate's `rate` charged for this call: its `cost`, or what `settleCost` said. */
  readonly cost: number;
  /** Whether the slot has gone back to the gate (released, or taken back after `maxHold`). */
  readonly released: boolean;
  /**
   * Runs once if the permit's request makes no progress for the gate's `maxHold` (or outlives
   * `maxHoldTotal`), just before the gate takes it back: stop using the resource here.
   */
  onHoldTimeout: ((error: PermitHoldTimeoutError) => void) | undefined;
  /**
   * What the permit is for, for leak reports: method, origin and path, never a query, header
   * or body. Assign undici's dispatch options or `{ method, origin: url }`: reading it gives
   * only those three (the query, credentials and everything else dropped); the object you
   * assigned is reduced when first read and let go when the permit is released.
   */
  get request(): PermitTarget | undefined;
  set request(info: PermitRequestInfo | undefined);
  /** Where it was asked for; captured only while `gate.traceAcquires` is on (a leak detector). */
  readonly acquiredFrom: AcquireSite | undefined;
  /**
   * The request made progress (response headers or bytes arrived): `maxHold` counts time
   * without progress, so a stream that keeps sending keeps its permit.
   */
  noteProgress(): void;
  /**
   * Returns the slot to the gate. Idempotent: later calls change nothing. Pass `'aborted'` when
   * the request was cancelled by its caller (a client disconnect): counted as `abortedInFlight`.
   */
  release(how?: 'released' | 'aborted'): void;
  /**
   * The call's real cost, known only from its response (an LLM API's token usage): the gate's
   * rate is corrected by `actual − cost`. Extra units delay the next calls; a refund lets them
   * go sooner. Callable while held or after the release; a second call settles against the
   * first. A TypeError on a gate without a `rate`, or for a negative or non-finite `actual`.
   */
  settleCost(actual: number): void;
}

/** The gate's access to a permit's private state. */
export const permitEntry = {
  isHeld: undefined as unknown as (permit: Waiter) => boolean,
  /** A waiter granted: it becomes the permit itself (one object per queued caller, not two). */
  activate: undefined as unknown as (waiter: Waiter, now: number) => void,
  settle: undefined as unknown as (permit: Waiter, state: typeof RELEASED | typeof EXPIRED) => void,
};

/**
 * The receiving end of `Semaphore.wait`: told synchronously of its grant or rejection.
 * For integration layers on hot paths, where a promise, an AbortSignal and a listener per
 * waiter cost more than the request they guard.
 */
export interface WaitTargetOf<P> {
  /** A permit is yours. Called from inside the gate: keep it short and do not block. */
  granted(permit: P): void;
  /** Shed (`QueueFullError`, `QueueTimeoutError`) or cancelled (the reason given to `cancel`). */
  rejected(reason: unknown): void;
}

/** A queued `Semaphore.wait`. */
export interface WaitTicket {
  /** Leaves the queue at once and rejects the target with `reason`; no-op once settled. */
  cancel(reason: unknown): void;
}

/**
 * The one implementation of {@link Permit}, not exported from the package, and the gate's
 * parked waiter: a node in its class's FIFO queue and, with the gate's default deadline on a
 * gate that keeps one, its deadline list. A waiter settles a promise (`acquire`, `run`) or tells a {@link WaitTarget} (`wait`).
 * Granted, it becomes the permit itself (`WAITING` to `HELD`, the queue links reused for the
 * holders list): a queued caller costs one object, not a waiter and then a permit.
 *
 * One flat class, its fields all set in the constructor, rather than a waiter subclass: V8
 * builds a derived class through a generic construct stub, which was a measurable part of a
 * queued call (issue 14), and one map keeps every access on this hot path monomorphic.
 */
export class GatePermit<G = unknown> implements PermitOf<G>, WaitTicket {
  #state: number;
  /**
   * What the holder said of its request, reduced to a {@link PermitTarget} on first read (a
   * leak report, a status page) rather than on every request: the regex and case folding
   * were most of the gate's own cost per HTTP request. Only the reduced form is ever handed
   * out, and the holder's object is let go at the release.
   */
  #requestInfo: PermitRequestInfo | undefined;
  #request: PermitTarget | undefined;
  /**
   * @internal Set at the grant; a gate observed later stamps its earlier permits once. While
   * waiting: the clock reading when it was queued (see `enqueuedAt`).
   *
   * This and `aliveAt` are plain class fields, defined `undefined` before the constructor sets
   * them: V8 then keeps them tagged, so a waiter's two readings share one heap number and a
   * grant's `NaN` is a constant. Set first to a number, each would get a double box of its own
   * (40 B more per parked waiter, measured).
   */
  acquiredAt: number;
  /** @internal Clock at the grant or the last progress: the holders list is in this order. */
  aliveAt: number;
  // The fields below are `declare`d and set in the constructor only: a plain declaration
  // would also define each as `undefined` first (class fields have define semantics), one
  // DefineNamedOwnIC per field per call.
  declare readonly weight: number;
  declare onHoldTimeout: ((error: PermitHoldTimeoutError) => void) | undefined;
  declare acquiredFrom: AcquireSite | undefined;
  /** @internal While waiting: its class's queue; once held: the holders list, least recently alive first. */
  declare prev: GatePermit<G> | undefined;
  /** @internal */
  declare next: GatePermit<G> | undefined;
  /**
   * @internal Once held: the `maxHoldTotal` timer, when the gate has one. While a waiter:
   * its own wait-deadline timer (cleared when it leaves the queue, so never both).
   */
  declare totalTimer: ReturnType<typeof setTimeout> | undefined;
  /** @internal The priority class it was granted in (or waits in); it knows the gate. */
  declare readonly cls: QueueClass<GatePermit<G>>;
  /** @internal The gate's deadline list (when it keeps one), while waiting with the gate's own deadline. */
  declare dPrev: GatePermit<G> | undefined;
  /** @internal */
  declare dNext: GatePermit<G> | undefined;
  /** @internal In its class's queue (not yet granted, shed or cancelled). */
  declare queued: boolean;
  /** @internal run(): the task to start once granted. */
  declare task: RunFn | undefined;
  /** @internal acquire()/run(): how to settle the caller's promise (run(): with `undefined`). */
  declare resolve: ((permit: unknown) => void) | undefined;
  /** @internal */
  declare reject: ((reason: unknown) => void) | undefined;
  /** @internal wait(): whom to tell instead. */
  declare readonly target: WaitTargetOf<PermitOf<G>> | undefined;
  /** @internal The caller's signal, listened to while waiting and handed to a run() task. */
  declare readonly signal: AbortSignal | undefined;

  static {
    permitEntry.isHeld = (permit) => permit.#state === HELD;
    permitEntry.activate = (permit, now) => {
      permit.#state = HELD;
      permit.acquiredAt = now;
      permit.aliveAt = now;
    };
    permitEntry.settle = (permit, state) => {
      permit.#state = state;
    };
  }

  constructor(
    grant: typeof GRANT,
    cls: QueueClass<GatePermit<G>>,
    acquiredAt: number,
    weight: number,
    state: typeof HELD | typeof WAITING,
    target: WaitTargetOf<PermitOf<G>> | undefined,
    signal: AbortSignal | undefined,
  ) {
    if (grant !== GRANT) {
      throw new TypeError('Permit is not constructible: acquire one from a gate');
    }
    this.#state = state;
    this.#requestInfo = undefined;
    this.#request = undefined;
    this.acquiredAt = acquiredAt;
    this.weight = weight;
    this.aliveAt = acquiredAt;
    this.onHoldTimeout = undefined;
    this.acquiredFrom = undefined;
    this.prev = undefined;
    this.next = undefined;
    this.totalTimer = undefined;
    this.cls = cls;
    this.dPrev = undefined;
    this.dNext = undefined;
    this.queued = state === WAITING;
    this.task = undefined;
    this.resolve = undefined;
    this.reject = undefined;
    this.target = target;
    this.signal = signal;
  }

  get gate(): G {
    return this.cls.gate as G;
  }

  get released(): boolean {
    return this.#state !== HELD;
  }

  get request(): PermitTarget | undefined {
    const info = this.#requestInfo;
    if (info !== undefined) {
      this.#requestInfo = undefined;
      this.#request = permitTarget(info);
    }
    return this.#request;
  }
  set request(info: PermitRequestInfo | undefined) {
    this.#requestInfo = info ?? undefined;
    this.#request = undefined;
  }

  noteProgress(): void {
    if (this.#state === HELD) gateEntry.progress(this.cls.gate, this);
  }

  release(how?: 'released' | 'aborted'): void {
    // `#state` is a brand check too: release() called on anything but a granted permit throws.
    if (this.#state === HELD) {
      this.#state = RELEASED;
      gateEntry.release(this.cls.gate, this, how === 'aborted' ? 'aborted' : 'released');
      this.#requestInfo = undefined; // release subscribers have read it, if they wanted to
    } else if (this.#state === RELEASED) {
      // After a maxHold take-back (EXPIRED) the holder's own release is expected, not a bug.
      gateEntry.doubleRelease(this.cls.gate, this);
    }
  }

  get cost(): number {
    // Kept by the gate's rate, and only when not 1: a permit carries no field for it.
    return gateEntry.costOf(this.cls.gate, this);
  }

  settleCost(actual: number): void {
    gateEntry.settleCost(this.cls.gate, this, actual);
  }

  [Symbol.dispose](): void {
    this.release();
  }

  /** @internal Clock reading when it was queued: deadlines, adaptive LIFO and its wait time count from here. */
  get enqueuedAt(): number {
    return this.acquiredAt;
  }

  /** @internal Its own wait-deadline timer (a per-call `timeout`); `undefined` with the gate's default deadline. */
  get timer(): ReturnType<typeof setTimeout> | undefined {
    return this.totalTimer;
  }
  set timer(timer: ReturnType<typeof setTimeout> | undefined) {
    this.totalTimer = timer;
  }

  /** @internal */
  granted(permit: PermitOf<G>): void {
    if (this.target !== undefined) this.target.granted(permit);
    else if (this.task === undefined) this.resolve!(permit);
    else {
      // A queued run(): its start finds it in the grant order. Resolving with the permit would
      // cost the promise machinery a `then` lookup along its prototype chain, about 300
      // instructions per grant (callgrind), more than the rest of the grant.
      startQueue.push(this);
      this.resolve!(undefined);
    }
  }

  /** @internal */
  rejected(reason: unknown): void {
    if (this.target !== undefined) this.target.rejected(reason);
    else this.reject!(reason);
  }

  /** WaitTicket: leaves the queue at once (a no-op once granted or settled). */
  cancel(reason: unknown): void {
    gateEntry.abort(this.cls.gate, this, reason);
  }

  /** @internal EventListener object: no closure per waiter. */
  handleEvent(): void {
    gateEntry.abort(this.cls.gate, this, this.signal?.reason);
  }
}

/**
 * The boundary between the interface users see and a gate's view of a waiter: the gate keeps
 * waiters as {@link GatePermit}s, not yet granted.
 */
export type Waiter<G = unknown> = GatePermit<G>;

/** A new waiter, `WAITING` until the gate grants it. */
export function newWaiter<G>(
  target: WaitTargetOf<PermitOf<G>> | undefined,
  signal: AbortSignal | undefined,
  enqueuedAt: number,
  cls: QueueClass<GatePermit<G>>,
  weight: number,
): Waiter<G> {
  return new GatePermit<G>(GRANT, cls, enqueuedAt, weight, WAITING, target, signal);
}

/** A permit granted at once, never queued. */
export function newPermit<G>(
  cls: QueueClass<GatePermit<G>>,
  now: number,
  weight: number,
): GatePermit<G> {
  return new GatePermit<G>(GRANT, cls, now, weight, HELD, undefined, undefined);
}

export type RunFn = (signal: AbortSignal | undefined) => unknown;

/** run() with a permit in hand: `fn` starts now, on the caller's stack. */
export async function runHeld<T>(
  permit: { release(): void },
  fn: (signal: AbortSignal | undefined) => T | PromiseLike<T>,
  signal: AbortSignal | undefined,
): Promise<T> {
  try {
    // Cancel vs grant in one tick: the abort wins, the permit goes straight back.
    if (signal?.aborted) throw signal.reason;
    return await fn(signal);
  } finally {
    permit.release();
  }
}

/** The promise a queued acquire()/run() caller holds. */
export function promiseFor<G>(waiter: Waiter<G>): Promise<PermitOf<G>> {
  return new Promise<PermitOf<G> | undefined>((resolve, reject) => {
    waiter.resolve = resolve as (permit: unknown) => void;
    waiter.reject = reject;
  }) as Promise<PermitOf<G>>;
}

/**
 * Queued run() waiters granted and not started yet, oldest first, across every gate: each
 * grant resolves its waiter's promise with `undefined` and queues the waiter here, and the
 * reactions run in the order the promises were resolved (a microtask queue is FIFO, and each of
 * these promises has the one reaction chained in run()), so each start takes the oldest.
 */
class StartQueue {
  #ring: (Waiter | undefined)[] = new Array(16).fill(undefined);
  #head = 0;
  #size = 0;

  push(waiter: Waiter): void {
    let ring = this.#ring;
    if (this.#size === ring.length) ring = this.#grow();
    ring[(this.#head + this.#size) & (ring.length - 1)] = waiter;
    this.#size++;
  }

  shift(): Waiter {
    const ring = this.#ring;
    const waiter = ring[this.#head]!;
    ring[this.#head] = undefined;
    this.#head = (this.#head + 1) & (ring.length - 1);
    this.#size--;
    return waiter;
  }

  #grow(): (Waiter | undefined)[] {
    const old = this.#ring;
    const ring: (Waiter | undefined)[] = new Array(old.length * 2).fill(undefined);
    for (let i = 0; i < this.#size; i++) ring[i] = old[(this.#head + i) & (old.length - 1)];
    this.#ring = ring;
    this.#head = 0;
    return ring;
  }
}
const startQueue = new StartQueue();

/**
 * A queued run() task's start: a reaction chained in its caller's tick, so it runs in the
 * caller's async context, one microtask after the grant. A reaction, not a suspended async
 * function: a parked caller costs a promise and a reaction, not an async frame (~300 B more,
 * and a burst of 100,000 parked callers 40% more instructions per call, measured).
 */
export function runGranted(): Promise<unknown> {
  const waiter = startQueue.shift();
  return runHeld(waiter, waiter.task!, waiter.signal);
}

export function onWaiterTimer(waiter: Waiter): void {
  // Keep `waiter.timer` set: #dequeue tells an own-deadline waiter by it (clearing a fired
  // timer is a no-op); unset, it would unlink the gate's deadline list instead.
  gateEntry.expire(waiter.cls.gate, waiter);
}
