/**
 * A waiter of a shared gate in this process. Its states: SENDING (its acquire is on the wire),
 * QUEUED (it holds a ticket in Redis), FALLBACK (Redis is unreachable; it waits for this
 * process's local share), LOCAL (this process's own limit is full: it waits here, with no
 * ticket, until a permit of this process goes back), DONE.
 */
import { describe, positiveInteger } from '../common/options.js';
import { checkCost, type ResolvedRate } from '../gate/rate.js';
import type { WaitOptions, WaitTarget, WaitTicket } from '../gate/semaphore.js';

/**
 * A shared call's options: its deadline (undefined: the gate's), its units of the cap, and its
 * units of the gate's rate.
 */
export interface SharedCall {
  timeout: number | undefined;
  weight: number;
  cost: number;
}

/**
 * A shared permit holds `weight` units of the cap (default 1) in one FIFO across processes;
 * priority classes stay local-only. The weight's bound (the limit) is the gate's to check.
 */
export function sharedCall(
  options: WaitOptions,
  rate: ResolvedRate | undefined,
  gate: string | undefined,
): SharedCall {
  if (options.priority !== undefined) {
    throw new TypeError(
      `priority classes are local-only: a shared gate is one FIFO, got priority ${describe(options.priority)}`,
    );
  }
  const weight = options.weight === undefined ? 1 : positiveInteger('weight', options.weight);
  const cost = options.cost === undefined ? 1 : checkCost(options.cost, rate, gate ?? 'this gate');
  return { timeout: options.timeout, weight, cost };
}
export const SENDING = 0;
export const QUEUED = 1;
export const FALLBACK = 2;
export const DONE = 3;
export const LOCAL = 4;

/**
 * What a waiter calls on its gate (a `SharedSemaphore`), declared here rather than imported:
 * shared-semaphore.ts builds the waiters, so importing it back would close an import circle.
 */
export interface WaiterGate {
  leave(waiter: SharedWaiter, reason: unknown, how: 'aborted' | 'timeout'): void;
  beforeDeadline(waiter: SharedWaiter): void;
}

/** A waiter of this process: its ticket in Redis (or its place in the local fallback). */
export class SharedWaiter implements WaitTicket {
  state = SENDING;
  /** A wake-up arrived before the acquire's own reply (two connections, any order). */
  grantedEarly = false;
  /** The store's wake-up epoch when its acquire was sent: a later loss may have eaten its wake-up. */
  epoch = 0;
  timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** When its wait deadline passes (the gate's clock). */
  deadline = 0;
  /** Units of the gate's rate it takes (its id carries them to Redis). */
  cost = 1;
  constructor(
    readonly gate: WaiterGate,
    public id: string,
    readonly target: WaitTarget,
    readonly enqueuedAt: number,
    /** Units of the cap it waits for (its id carries them to Redis). */
    readonly weight: number,
  ) {}
  cancel(reason: unknown): void {
    this.gate.leave(this, reason, 'aborted');
  }
}

export function onTimer(waiter: SharedWaiter): void {
  waiter.gate.leave(waiter, undefined, 'timeout');
}

/** Shortly before the deadline: the last chance to find a grant whose wake-up was lost. */
export function onRecheck(waiter: SharedWaiter, marginMs: number): void {
  waiter.timer = setTimeout(onTimer, marginMs, waiter);
  waiter.gate.beforeDeadline(waiter);
}
