/**
 * Priority classes for requests: the `priorityClass` request option that `limitHosts`,
 * `limitGate` and `limitFetch` read, and `withPriority`, which sets it on every request of a
 * dispatcher (fetch passes no options of its own to a dispatcher).
 */
import type { Dispatcher } from 'undici';
import { describe } from '../common/options.js';
import type { Semaphore } from '../gate/semaphore.js';
import type { DispatchInterceptor } from './interceptor.js';

/** The request option naming a request's priority class (undici dispatch options, fetch `init`). */
export interface PriorityClassOption {
  /**
   * The priority class to wait in at a partner gate configured with `priorities`; a gate
   * without classes ignores it, and an unknown name on a gate with classes is a TypeError.
   * Not `priority`: fetch's own `RequestInit.priority` (`'high' | 'low' | 'auto'`) has that name.
   */
  priorityClass?: string | undefined;
}

/**
 * `priorityClass` is a request option of undici's own `request`, `stream` and `dispatch` too, so
 * that `request(url, { dispatcher, priorityClass: 'batch' })` type-checks without a cast: the
 * interceptors read it from the dispatch options, where undici passes unknown keys through.
 */
declare module 'undici' {
  namespace Dispatcher {
    interface DispatchOptions extends PriorityClassOption {}
  }
}

const classed = new WeakMap<Semaphore, boolean>();

/** Whether `gate` was built with `priorities` (fixed at construction, so read once per gate). */
function hasClasses(gate: Semaphore): boolean {
  let known = classed.get(gate);
  if (known === undefined) {
    known = gate.stats().priorities !== undefined;
    classed.set(gate, known);
  }
  return known;
}

/**
 * The class `gate` should queue `priorityClass` in: `undefined` (the gate's first class, or
 * its only queue) when none was asked for or the gate has no classes. An unknown name is
 * passed on for the gate to refuse with a TypeError naming its classes.
 */
export function priorityFor(gate: Semaphore, priorityClass: unknown): string | undefined {
  if (priorityClass === undefined || !hasClasses(gate)) return undefined;
  return priorityClass as string;
}

/**
 * An undici interceptor that puts every request of its dispatcher in priority class `name`,
 * unless the request names its own (`priorityClass`). Compose it outside `limitHosts`; the way
 * to give `fetch` a class, as fetch hands a dispatcher no options of the caller's.
 *
 * @example
 * const batch = new Agent().compose(limitHosts(limiter), withPriority('batch'));
 * await fetch('https://api.billing.example/export', { dispatcher: batch });
 */
export function withPriority(name: string): DispatchInterceptor {
  if (typeof name !== 'string' || name === '') {
    throw new TypeError(`withPriority: name must be a non-empty string, got ${describe(name)}`);
  }
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) =>
    function prioritisedDispatch(opts, handler) {
      if ((opts as PriorityClassOption).priorityClass !== undefined) return dispatch(opts, handler);
      return dispatch({ ...opts, priorityClass: name } as Dispatcher.DispatchOptions, handler);
    };
  return interceptor as DispatchInterceptor;
}
