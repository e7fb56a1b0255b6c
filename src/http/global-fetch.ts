import { describe } from '../common/options.js';
import type { AnyDispatcher } from './interceptor.js';

/**
 * `init` for Node's global `fetch` with a `dispatcher`, typed without a cast.
 *
 * Node's `fetch` takes `init.dispatcher` at run time, but TypeScript refuses an undici 7 or 8
 * dispatcher there: `RequestInit` has no `dispatcher` under the DOM lib, and under @types/node
 * it is typed with the undici-types that Node bundles (6), which a newer undici's `Agent` does
 * not fit. This returns `init` with the dispatcher added, typed as the global `RequestInit`.
 *
 * Node 20–24 bundle undici 6–7, whose fetch hands dispatchers callback-API handlers, which a
 * plain undici 8 dispatcher refuses ("invalid onRequestStart method"); hostgate's dispatchers
 * (limitHosts-composed, LimitedAgent) translate them for the undici 8 below, so they work here.
 *
 * @example
 * const dispatcher = new Agent().compose(limitHosts(limiter));
 * const res = await fetch('https://api.billing.example/invoices', withDispatcher(dispatcher, { signal }));
 */
export function withDispatcher(dispatcher: AnyDispatcher, init?: RequestInit): RequestInit {
  if (typeof (dispatcher as { dispatch?: unknown } | null)?.dispatch !== 'function') {
    throw new TypeError(
      `withDispatcher: dispatcher must be an undici Dispatcher (Agent, Pool, Client, or one from compose()), got ${describe(dispatcher)}`,
    );
  }
  return { ...init, dispatcher } as RequestInit;
}
