import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { Dispatcher } from 'undici';
import { onTestFinished } from 'vitest';
import type { ReleaseMessage, ReleaseReason } from '../../src/gate/diagnostics.js';
import type { Semaphore } from '../../src/gate/semaphore.js';

/**
 * Resolves once `gate` holds no permit, woken by its `hostgate:release` events (no polling, no
 * count of event-loop turns): a cancelled request's permit returns after its teardown.
 */
export function whenIdle(gate: Semaphore): Promise<void> {
  if (gate.held === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const onRelease = (message: unknown) => {
      if ((message as ReleaseMessage).gate !== gate || gate.held !== 0) return;
      unsubscribe('hostgate:release', onRelease);
      resolve();
    };
    subscribe('hostgate:release', onRelease);
    // A test that fails (or times out) before the release must not leave the subscriber to the
    // files after it in the process: every later gate would stamp and publish each release.
    onTestFinished(() => void unsubscribe('hostgate:release', onRelease));
  });
}

/** Records every release of `gate` (its reason) until `stop()`. */
export function recordReleases(gate: Semaphore): { reasons: ReleaseReason[]; stop(): void } {
  const reasons: ReleaseReason[] = [];
  const onRelease = (message: unknown) => {
    const m = message as ReleaseMessage;
    if (m.gate === gate) reasons.push(m.reason);
  };
  subscribe('hostgate:release', onRelease);
  const stop = () => void unsubscribe('hostgate:release', onRelease);
  onTestFinished(stop); // also when the test fails before its own stop()
  return { reasons, stop };
}

/**
 * An outer interceptor that speaks only undici's controller API: the gate then takes its
 * controller-API handler (undici's own clients speak the callback API, the other one).
 */
export const controllerApiOnly: Dispatcher.DispatcherComposeInterceptor =
  (dispatch) => (opts, handler) =>
    dispatch(opts, {
      onRequestStart: (c, context) => handler.onRequestStart?.(c, context),
      onRequestUpgrade: (c, status, headers, socket) =>
        handler.onRequestUpgrade?.(c, status, headers, socket),
      onResponseStart: (c, status, headers, message) =>
        handler.onResponseStart?.(c, status, headers, message),
      onResponseData: (c, chunk) => handler.onResponseData?.(c, chunk),
      onResponseEnd: (c, trailers) => handler.onResponseEnd?.(c, trailers),
      onResponseError: (c, error) => handler.onResponseError?.(c, error),
    });

/** The caller's rejection, or undefined when it resolved. */
export async function settle<T>(promise: Promise<T>): Promise<unknown> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    return error;
  }
}
