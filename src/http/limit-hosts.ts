import type { Dispatcher } from 'undici';
import { describe } from '../common/options.js';
import { Semaphore } from '../gate/semaphore.js';
import { holdsPermitOf, markDispatcherLayer } from '../partners/gate-layers.js';
import {
  type HostLimiter,
  type HostLimiterOptions,
  limiterFrom,
} from '../partners/host-limiter.js';
import type { DispatchInterceptor } from './interceptor.js';
import { LegacyHandlerAdapter } from './legacy-handler-adapter.js';
import { type LegacyHandler, LegacyLimitHandler } from './legacy-limit-handler.js';
import { LimitHandler } from './limit-handler.js';
import { loadUndici } from './undici.js';

/**
 * An undici interceptor that gives every request a permit of its partner's gate, held from
 * dispatch until the response has ended (or failed, or been aborted).
 *
 * Compose it *inside* undici's retry and redirect interceptors, so that every attempt and
 * every hop takes its own permit and none is held while backing off:
 * `agent.compose(limitHosts(limiter), interceptors.retry(), interceptors.redirect())`
 * (in `compose(a, b)`, `b` is the outermost).
 *
 * The gate is picked by the request's `opts.origin`, which undici's `request`, `fetch` and
 * `stream` set from their URL. A request without one (`client.request({ path })` on a `Client` or
 * `Pool`, which know their origin themselves) fails with undici's `InvalidArgumentError` under
 * undici 7: for a Client or Pool use `limitGate(limiter.gateFor(origin))`. (undici 8's `compose`
 * fills `opts.origin` from the Client's or Pool's URL, so limitHosts works there as it is.)
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
  const limiter = limiterFrom('limitHosts', limiterOrOptions);
  markDispatcherLayer(limiter);
  const interceptor: Dispatcher.DispatcherComposeInterceptor = (dispatch) =>
    function limitedDispatch(opts, handler) {
      let gate: Semaphore | undefined;
      try {
        gate = gateOf(limiter, opts);
      } catch (error) {
        // Unknown host under 'reject', every per-origin gate busy, a bad origin: the request
        // fails before it starts, as a dispatch error (one terminal callback, as undici does).
        // Called from LimitedAgent, undici's own handlers may speak only the callback API.
        if (typeof handler.onResponseError === 'function') {
          handler.onResponseError(
            undefined as unknown as Dispatcher.DispatchController,
            error as Error,
          );
        } else (handler as LegacyHandler).onError?.(error as Error);
        return false;
      }
      // No gate, or a limitFetch call above already holds this gate's permit for this request.
      if (gate === undefined || holdsPermitOf(gate)) return dispatch(opts, handler);
      return dispatchThrough(gate, dispatch, opts, handler);
    };
  return interceptor as DispatchInterceptor;
}

/**
 * The gate of a request's origin. What undici's Agent would refuse (no origin, an empty one, not
 * http(s)) is refused with undici's own error (`InvalidArgumentError`, `UND_ERR_INVALID_ARG`):
 * limitHosts changes no error's type.
 */
function gateOf(limiter: HostLimiter, opts: Dispatcher.DispatchOptions): Semaphore | undefined {
  const origin = opts.origin;
  if (origin == null || origin === '') {
    throw new (loadUndici().errors.InvalidArgumentError)(
      'opts.origin must be a non-empty string or URL. limitHosts picks the gate by origin: on a Client or Pool (whose requests carry none) use limitGate(limiter.gateFor(origin)).',
    );
  }
  try {
    return limiter.gateFor(origin as string | URL);
  } catch (error) {
    if ((error as Error).constructor !== TypeError) throw error;
    throw new (loadUndici().errors.InvalidArgumentError)((error as Error).message);
  }
}

/**
 * An undici interceptor that holds a permit of one gate per request: every request the
 * dispatcher sends, whatever its host, from dispatch until its response has ended. Used by
 * `hostgate/express` for `perRequest`; also a plain "at most N at once" for a dispatcher, and
 * the way to gate a `Client` or `Pool` (one origin): `limitGate(limiter.gateFor(origin)!)`.
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

/**
 * Dispatches one request through `gate` to `dispatch`: the handler both interceptors use, and
 * the one a Dispatcher wrapper reuses (`dispatchThrough(gate, inner.dispatch.bind(inner), opts,
 * handler)`).
 * @internal
 */
export function dispatchThrough(
  gate: Semaphore,
  dispatch: Dispatcher.Dispatch,
  opts: Dispatcher.DispatchOptions,
  handler: Dispatcher.DispatchHandler,
): boolean {
  // undici 7 hands interceptors a handler with both APIs when its caller spoke the callback
  // one (request, stream, fetch do): keep to that API and undici converts nothing.
  const legacy = handler as LegacyHandler;
  if (typeof legacy.onHeaders !== 'function' || typeof legacy.onConnect !== 'function') {
    return new LimitHandler(dispatch, opts, handler).start(gate);
  }
  if (!innerTakesCallbacks()) {
    // undici 8 below, and a caller that speaks only the callback API: Node's global fetch
    // (its bundled undici 6 or 7). Translate, and keep to HTTP/1.1 as undici 8's own
    // Dispatcher1Wrapper does for such callers (they do not read HTTP/2 responses).
    const callbacksOnly =
      typeof (handler as { onRequestStart?: unknown }).onRequestStart !== 'function';
    const adapted = callbacksOnly
      ? (new LegacyHandlerAdapter(legacy) as unknown as Dispatcher.DispatchHandler)
      : handler;
    const h2 = (opts as { allowH2?: boolean }).allowH2;
    const options = callbacksOnly && h2 !== false ? { ...opts, allowH2: false } : opts;
    return new LimitHandler(dispatch, options, adapted).start(gate);
  }
  return new LegacyLimitHandler(dispatch, opts, legacy).start(gate);
}

let takesCallbacks: boolean | undefined;

/**
 * Whether the undici below takes callback-API handlers: 7 does, 8 refuses them ("invalid
 * onRequestStart method"; `Dispatcher1Wrapper`, its adapter for them, is new in 8). Asked only
 * for a caller that speaks the callback API, so it loads undici only where undici is in use.
 */
function innerTakesCallbacks(): boolean {
  takesCallbacks ??= !('Dispatcher1Wrapper' in loadUndici());
  return takesCallbacks;
}
