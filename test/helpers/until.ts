import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { ReleaseMessage } from '../../src/gate/diagnostics.js';
import type { Semaphore } from '../../src/gate/semaphore.js';

// Captured at load, before any test installs fake timers: deadlines here are wall time.
const realSetTimeout = globalThis.setTimeout;
const realClearTimeout = globalThis.clearTimeout;
/** Generous: only a broken test waits this long, never a slow machine doing its work. */
const DEFAULT_TIMEOUT_MS = 10_000;
const POLL_MS = 2;

/**
 * Resolves once `done()` holds, checked on a short real-time poll; rejects after `timeoutMs`
 * of wall time. It bounds time, not event-loop turns: a busy machine only makes it slower.
 */
export function until(
  done: () => boolean,
  what: string,
  timeoutMs = DEFAULT_TIMEOUT_MS,
): Promise<void> {
  if (done()) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const started = performance.now();
    const poll = () => {
      if (done()) resolve();
      else if (performance.now() - started > timeoutMs) {
        reject(new Error(`still not ${what} after ${timeoutMs} ms`));
      } else realSetTimeout(poll, POLL_MS);
    };
    realSetTimeout(poll, POLL_MS);
  });
}

/**
 * Resolves once `gate` holds no permit, woken by the gate's own `hostgate:release` events. A
 * request cancelled in flight returns its permit once its connection is down, after its caller
 * saw the rejection.
 */
export function released(gate: Semaphore, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<void> {
  if (gate.held === 0) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const onRelease = (message: unknown) => {
      if ((message as ReleaseMessage).gate === gate && gate.held === 0) finish();
    };
    const timer = realSetTimeout(() => {
      finish(new Error(`gate ${gate.name ?? ''} still holds ${gate.held} after ${timeoutMs} ms`));
    }, timeoutMs);
    const finish = (error?: Error) => {
      realClearTimeout(timer);
      unsubscribe('hostgate:release', onRelease);
      if (error === undefined) resolve();
      else reject(error);
    };
    subscribe('hostgate:release', onRelease);
  });
}
