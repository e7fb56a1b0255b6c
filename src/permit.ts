/** A gate's permits and waiters: what a Semaphore hands out and what it keeps in its queue. */
import type { AcquireSite, PermitRequestInfo, ReleaseReason } from './diagnostics.js';
import type { PermitHoldTimeoutError } from './errors.js';
import type { Semaphore } from './semaphore.js';

export const HELD = 0;
export const RELEASED = 1;
export const EXPIRED = 2;

/**
 * The gate's internal entry points, bound by Semaphore's static block so that its #private
 * state stays private while Permit and Waiter, here, can still reach it.
 */
export const gateEntry = {
  release: undefined as unknown as (gate: Semaphore, permit: Permit, reason: ReleaseReason) => void,
  abort: undefined as unknown as (gate: Semaphore, waiter: Waiter, reason: unknown) => void,
  expire: undefined as unknown as (gate: Semaphore, waiter: Waiter) => void,
};

/**
 * One granted slot of a gate. Release it exactly once — or bind it to a scope with
 * `using permit = await gate.acquire()`; a second `release()` is a counted no-op.
 */
export class Permit implements Disposable {
  /** The gate this permit belongs to. */
  readonly gate: Semaphore;
  /** Clock reading (ms) when the permit was granted. */
  readonly acquiredAt: number;
  /**
   * Runs once if the permit outlives the gate's `maxHold`, just before the gate takes it back.
   * The holder must stop using the resource here (abort the request).
   */
  onHoldTimeout: ((error: PermitHoldTimeoutError) => void) | undefined = undefined;
  /** What the permit is for, set by the HTTP layers: method, origin and path for leak reports. */
  request: PermitRequestInfo | undefined = undefined;
  /** Where it was asked for; captured only while `gate.traceAcquires` is on (a leak detector). */
  acquiredFrom: AcquireSite | undefined = undefined;
  /** @internal holders list, oldest first */
  prev: Permit | undefined = undefined;
  /** @internal */
  next: Permit | undefined = undefined;
  /** @internal */
  state = HELD;

  constructor(gate: Semaphore, acquiredAt: number) {
    this.gate = gate;
    this.acquiredAt = acquiredAt;
  }

  /** Whether the slot has gone back to the gate (released, or taken back after `maxHold`). */
  get released(): boolean {
    return this.state !== HELD;
  }

  /**
   * Returns the slot to the gate. Idempotent: later calls change nothing. Pass `'aborted'` when
   * the request was cancelled by its caller (a client disconnect): counted as `abortedInFlight`.
   */
  release(how?: 'released' | 'aborted'): void {
    gateEntry.release(this.gate, this, how ?? 'released');
  }

  [Symbol.dispose](): void {
    gateEntry.release(this.gate, this, 'released');
  }
}

/**
 * The receiving end of {@link Semaphore.wait}: told synchronously of its grant or rejection.
 * For integration layers on hot paths, where a promise, an AbortSignal and a listener per
 * waiter cost more than the request they guard.
 */
export interface WaitTarget {
  /** A permit is yours. Called from inside the gate: keep it short and do not block. */
  granted(permit: Permit): void;
  /** Shed (`QueueFullError`, `QueueTimeoutError`) or cancelled (the reason given to `cancel`). */
  rejected(reason: unknown): void;
}

/** A queued {@link Semaphore.wait}. */
export interface WaitTicket {
  /** Leaves the queue at once and rejects the target with `reason`; no-op once settled. */
  cancel(reason: unknown): void;
}

/**
 * A parked waiter: a node in the FIFO queue and, with the default deadline, the deadline list.
 * It settles a promise (`acquire`) or tells a {@link WaitTarget} (`wait`).
 */
export class Waiter implements WaitTicket {
  prev: Waiter | undefined = undefined;
  next: Waiter | undefined = undefined;
  dPrev: Waiter | undefined = undefined;
  dNext: Waiter | undefined = undefined;
  queued = true;
  timer: ReturnType<typeof setTimeout> | undefined = undefined;
  site: AcquireSite | undefined = undefined;
  task: RunFn | undefined = undefined;
  constructor(
    readonly gate: Semaphore,
    readonly target: WaitTarget | undefined,
    readonly resolve: ((permit: Permit) => void) | undefined,
    readonly reject: ((reason: unknown) => void) | undefined,
    readonly signal: AbortSignal | undefined,
    readonly enqueuedAt: number,
  ) {}

  granted(permit: Permit): void {
    if (this.target !== undefined) this.target.granted(permit);
    else if (this.task !== undefined) {
      // run(): the task starts on the grant and the caller's promise takes its result.
      runHeld(permit, this.task, this.signal).then(
        this.resolve as (value: unknown) => void,
        this.reject,
      );
    } else this.resolve!(permit);
  }

  rejected(reason: unknown): void {
    if (this.target !== undefined) this.target.rejected(reason);
    else this.reject!(reason);
  }

  cancel(reason: unknown): void {
    gateEntry.abort(this.gate, this, reason);
  }

  /** EventListener object: no closure per waiter. */
  handleEvent(): void {
    gateEntry.abort(this.gate, this, this.signal?.reason);
  }
}

export type RunFn = (signal: AbortSignal | undefined) => unknown;

export async function runHeld<T>(
  permit: Permit,
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

export function onWaiterTimer(waiter: Waiter): void {
  // Keep `waiter.timer` set: #dequeue tells an own-deadline waiter by it (clearing a fired
  // timer is a no-op); unset, it would unlink the gate's deadline list instead.
  gateEntry.expire(waiter.gate, waiter);
}
