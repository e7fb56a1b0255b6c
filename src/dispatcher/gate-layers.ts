/**
 * What the HTTP layers know about a gate beyond the gate itself: how long an aborted request's
 * permit is kept (`holdAfterAbort`), and which gates the current call already holds a permit of.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Semaphore } from '../semaphore.js';

const holdAfterAbort = new WeakMap<Semaphore, number>();

/** A partner rule's `holdAfterAbort` (ms), set by HostLimiter. */
export function setHoldAfterAbort(gate: Semaphore, ms: number): void {
  if (ms > 0) holdAfterAbort.set(gate, ms);
}

/** How long `gate` keeps an aborted in-flight request's permit after teardown; 0 by default. */
export function holdAfterAbortOf(gate: Semaphore): number {
  return holdAfterAbort.get(gate) ?? 0;
}

/**
 * The gates whose permit the current limitFetch call holds, so that a `limitHosts` below it
 * (a global dispatcher composed with the same limiter) does not wait for a second permit of the
 * same gate: with limit 1 that wait could never end. Only limiters that a limitHosts was made
 * from pay for it: on Node 20 an AsyncLocalStorage in use costs every promise a little.
 */
const held = new AsyncLocalStorage<ReadonlySet<Semaphore>>();
const dispatcherLayers = new WeakSet<object>();

/** limitHosts was made from this limiter: its limitFetch calls mark the gates they hold. */
export function markDispatcherLayer(limiter: object): void {
  dispatcherLayers.add(limiter);
}

/** Runs `fn` as holding a permit of `gate`, when a limitHosts of `limiter` may be below. */
export function runHolding<T>(limiter: object, gate: Semaphore, fn: () => T): T {
  if (!dispatcherLayers.has(limiter)) return fn();
  const outer = held.getStore();
  return held.run(new Set(outer).add(gate), fn);
}

/** Whether the current call already holds a permit of `gate`. */
export function holdsPermitOf(gate: Semaphore): boolean {
  return held.getStore()?.has(gate) === true;
}
