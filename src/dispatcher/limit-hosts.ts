import type { Dispatcher } from 'undici';
import { HostLimiter, type HostLimiterOptions } from '../host-limiter.js';
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
 * @example
 * const limiter = new HostLimiter({ partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 20 }] });
 * const dispatcher = new Agent().compose(limitHosts(limiter));
 * await request('https://api.billing.example/invoices', { dispatcher });
 */
export function limitHosts(
  limiterOrOptions: HostLimiter | HostLimiterOptions,
): Dispatcher.DispatcherComposeInterceptor {
  const limiter =
    limiterOrOptions instanceof HostLimiter ? limiterOrOptions : new HostLimiter(limiterOrOptions);
  return (dispatch) =>
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
      // undici hands interceptors a handler with both APIs when its caller spoke the callback
      // one (request, stream, fetch do): keep to that API and undici converts nothing.
      const legacy = handler as LegacyHandler;
      const limited =
        typeof legacy.onHeaders === 'function' && typeof legacy.onConnect === 'function'
          ? new LegacyLimitHandler(dispatch, opts, legacy)
          : new LimitHandler(dispatch, opts, handler);
      const permit = gate.tryAcquire();
      return permit === undefined ? limited.wait(gate) : limited.dispatchWith(permit);
    };
}
