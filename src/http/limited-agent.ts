import { EventEmitter } from 'node:events';
import type { Dispatcher } from 'undici';
import { describe } from '../common/options.js';
import {
  type HostLimiter,
  type HostLimiterOptions,
  limiterFrom,
} from '../partners/host-limiter.js';
import type { AnyDispatcher } from './interceptor.js';
import { limitHosts } from './limit-hosts.js';
import { loadUndici } from './undici.js';

/** What LimitedAgent needs of the dispatcher it wraps: undici's `Agent`, `Pool`, `Client`, …. */
export interface WrappedDispatcher extends AnyDispatcher {
  close(): Promise<void>;
  destroy(error?: Error | null): Promise<void>;
}

/**
 * LimitedAgent's base until undici is loaded: an EventEmitter (undici's Dispatcher is one, with
 * methods only), typed as the Dispatcher it becomes on the first construction.
 */
const DispatcherUntilLoaded = EventEmitter as unknown as typeof Dispatcher;

/**
 * A `Dispatcher` that gives every request a permit of its partner's gate and dispatches it
 * straight to the dispatcher it wraps: `limitHosts` in the shape of undici's own `RetryAgent`
 * (`new RetryAgent(agent, options)`), for wherever a dispatcher goes (`request`, `fetch`,
 * `setGlobalDispatcher`, Node's global `fetch` through `withDispatcher`).
 *
 * Same handler, same semantics as `limitHosts`: a permit from dispatch until the response has
 * ended, failed or been aborted; a bounded queue; shedding as `QueueFullError`/`QueueTimeoutError`.
 * It skips `compose`'s toll (a handler wrapper per request, and a header conversion for handlers
 * of the other API), so it runs close to the speed of the dispatcher it wraps (the README's
 * benchmark gives the measured ratios). `close()` and `destroy()`
 * close the wrapped dispatcher. To add undici's retry or redirect, compose them *outside*, so
 * that each attempt and each hop takes its own permit:
 * `new LimitedAgent(new Agent(), limiter).compose(interceptors.retry(), interceptors.redirect())`.
 *
 * A real undici `Dispatcher` (`instanceof Dispatcher`, `compose`, events), although importing
 * hostgate loads no undici: the first construction loads it and puts undici's `Dispatcher`
 * under this class (an undici that cannot run on this Node fails there, with the fix named).
 *
 * @example
 * const dispatcher = new LimitedAgent(new Agent(), limiter);
 * await request('https://api.billing.example/invoices', { dispatcher });
 */
export class LimitedAgent extends DispatcherUntilLoaded {
  readonly #inner: WrappedDispatcher;
  /** The limiter whose gates this dispatcher takes permits from. */
  readonly limiter: HostLimiter;
  /** limitHosts' dispatch over the wrapped dispatcher's own: one call, no wrappers. */
  readonly #dispatch: Dispatcher.Dispatch;

  constructor(dispatcher: WrappedDispatcher, limiterOrOptions: HostLimiter | HostLimiterOptions) {
    extendDispatcher();
    super();
    if (typeof (dispatcher as Partial<WrappedDispatcher> | null)?.dispatch !== 'function') {
      throw new TypeError(
        `LimitedAgent: dispatcher must be an undici Dispatcher (Agent, Pool, Client), got ${describe(dispatcher)}`,
      );
    }
    this.#inner = dispatcher;
    this.limiter = limiterFrom('LimitedAgent', limiterOrOptions);
    const inner = dispatcher.dispatch.bind(dispatcher) as unknown as Dispatcher.Dispatch;
    this.#dispatch = limitHosts(this.limiter)(inner);
  }

  override dispatch(
    options: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
  ): boolean {
    return this.#dispatch(options, handler);
  }

  override close(): Promise<void>;
  override close(callback: () => void): void;
  override close(callback?: () => void): Promise<void> | void {
    const closed = this.#inner.close();
    if (callback === undefined) return closed;
    closed.then(callback, callback);
  }

  override destroy(): Promise<void>;
  override destroy(error: Error | null): Promise<void>;
  override destroy(callback: () => void): void;
  override destroy(error: Error | null, callback: () => void): void;
  override destroy(
    errorOrCallback?: Error | null | (() => void),
    callback?: () => void,
  ): Promise<void> | void {
    const error = typeof errorOrCallback === 'function' ? null : (errorOrCallback ?? null);
    const done = typeof errorOrCallback === 'function' ? errorOrCallback : callback;
    const destroyed = this.#inner.destroy(error);
    if (done === undefined) return destroyed;
    destroyed.then(done, done);
  }
}

let extended = false;

/**
 * Makes undici's `Dispatcher` the base of LimitedAgent, once, before the first instance exists:
 * instances get `compose` and `instanceof Dispatcher`, and `super()` runs Dispatcher's
 * constructor. Dispatcher is an EventEmitter with methods only, so the chain stays
 * LimitedAgent → Dispatcher → EventEmitter.
 */
function extendDispatcher(): void {
  if (extended) return;
  const { Dispatcher: Base } = loadUndici();
  Object.setPrototypeOf(LimitedAgent.prototype, Base.prototype);
  Object.setPrototypeOf(LimitedAgent, Base);
  extended = true;
}
