/**
 * What the HTTP layers know about a gate beyond the gate itself: how long an aborted request's
 * permit is kept (`holdAfterAbort`), and which gates the current call already holds a permit of.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Semaphore } from '../gate/semaphore.js';

/** A partner rule's `holdAfterAbort`: ms, or `'typical'` (the gate's median hold time). */
export type HoldAfterAbort = number | 'typical';

const holdAfterAbort = new WeakMap<Semaphore, HoldAfterAbort>();

/** Set by HostLimiter from a partner rule. */
export function setHoldAfterAbort(gate: Semaphore, value: HoldAfterAbort): void {
  if (value !== 0) holdAfterAbort.set(gate, value);
}

/**
 * How long `gate` keeps an aborted in-flight request's permit after teardown, in ms; 0 by
 * default. Asked only when a request is aborted in flight, so `'typical'` may read the stats.
 */
export function holdAfterAbortOf(gate: Semaphore): number {
  const value = holdAfterAbort.get(gate);
  if (value === undefined) return 0;
  return value === 'typical' ? Math.round(gate.stats().hold.p50Ms) : value;
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
