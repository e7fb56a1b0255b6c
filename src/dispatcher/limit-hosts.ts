import type { Dispatcher } from 'undici';
import { HostLimiter, type HostLimiterOptions } from '../host-limiter.js';
import { describe } from '../options.js';
import { Semaphore } from '../semaphore.js';
import type { DispatchInterceptor } from './interceptor.js';
import { type LegacyHandler, LegacyLimitHandler } from './legacy-limit-handler.js';
import { LimitHandler } from './limit-handler.js';

/**
 * An undici interceptor that gives every request a permit of its partner's gate, held from
 * dispatch until the response has ended (or failed, or been aborted).
 *
 * Compose it *inside* undici's retry and redirect interceptors, so that every attempt and
 * every hop takes its own permit and none is held while backing off:
 * `agent.compose(limitHosts(limiter), interceptors.retry(), interceptors.redirect())`
 * (in `compose(a, b)`, `b` is the outermost).
 *
 * Works with undici 7 and undici 8 (a peer dependency): the returned interceptor fits the
 * `compose` of either version's `Agent`, `Pool` and `Client`.
 *
 * @example
 * const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 20 }] });
 * const dispatcher = new Agent().compose(limitHosts(limiter));
 * await request('https://api.billing.example/invoices', { dispatcher });
 */
export function limitHosts(
  limiterOrOptions: HostLimiter | HostLimiterOptions,
): DispatchInterceptor {
  const limiter =
    limiterOrOptions instanceof HostLimiter ? limiterOrOptions : new HostLimiter(limiterOrOptions);
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) =>
    function limitedDispatch(opts, handler) {
      let gate: ReturnType<HostLimiter['gateFor']>;
      try {
        gate = limiter.gateFor(opts.origin as string | URL);
      } catch (error) {
        // Bad URL, unknown host under 'reject', every per-origin gate busy: the request fails
        // before it starts, as a dispatch error.
        handler.onResponseError?.(
          undefined as unknown as Dispatcher.DispatchController,
          error as Error,
        );
        return false;
      }
      if (gate === undefined) return dispatch(opts, handler);
      return dispatchThrough(gate, dispatch, opts, handler);
    };
  return interceptor as DispatchInterceptor;
}

/**
 * An undici interceptor that holds a permit of one gate per request: every request the
 * dispatcher sends, whatever its host, from dispatch until its response has ended. Used by
 * `hostgate/express` for `perRequest`; also a plain "at most N at once" for a dispatcher.
 *
 * @example
 * const dispatcher = new Agent().compose(limitGate(new Semaphore({ limit: 8, name: 'batch' })));
 */
export function limitGate(gate: Semaphore): DispatchInterceptor {
  if (!(gate instanceof Semaphore)) {
    throw new TypeError(`limitGate: expected a Semaphore, got ${describe(gate)}`);
  }
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) =>
    function gatedDispatch(opts, handler) {
      return dispatchThrough(gate, dispatch, opts, handler);
    };
  return interceptor as DispatchInterceptor;
}

function dispatchThrough(
  gate: Semaphore,
  dispatch: Dispatcher.Dispatch,
  opts: Dispatcher.DispatchOptions,
  handler: Dispatcher.DispatchHandler,
): boolean {
  // undici hands interceptors a handler with both APIs when its caller spoke the callback
  // one (request, stream, fetch do): keep to that API and undici converts nothing.
  const legacy = handler as LegacyHandler;
  const limited =
    typeof legacy.onHeaders === 'function' && typeof legacy.onConnect === 'function'
      ? new LegacyLimitHandler(dispatch, opts, legacy)
      : new LimitHandler(dispatch, opts, handler);
  const permit = gate.tryAcquire();
  return permit === undefined ? limited.wait(gate) : limited.dispatchWith(permit);
}
