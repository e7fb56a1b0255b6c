import { afterAtLeast } from '../gate/clock.js';
import type { ReleaseReason } from '../gate/diagnostics.js';
import type { Permit } from '../gate/semaphore.js';
import { holdAfterAbortOf } from '../partners/gate-layers.js';

/**
 * The one teardown policy of every HTTP entry point (limitHosts, limitGate, limitFetch): when a
 * request that reached the partner fails or is cancelled, its permit returns once the client has
 * reported the request over, the connection is closed on our side, and the event loop has since
 * polled for I/O once — not before, or the next waiter could reach the partner while this
 * request is still open there.
 *
 * The report is an event of the client: undici's `onResponseError` (limitHosts), a rejected fetch
 * or a settled `body.cancel()` (limitFetch). undici closes the socket in the same synchronous call,
 * just after the report (`abort` → `onError`, then `socket.destroy()`: the FIN or RST is sent;
 * over HTTP/2 the stream is reset). A request written in that same turn reaches the partner with
 * the close: a partner that reads both in one poll counts both until its close phase, cap + 1
 * (test/helpers/partner.ts counts a request until its response closes, as a server does; issue
 * 24: every entry point showed it, limitFetch every time). So the permit comes back from the
 * check phase after the next poll phase: a second `setImmediate` from the first (the first runs
 * after the poll the teardown may have happened in). What this does not cover is a partner farther
 * away that reads the close late or keeps working after it: the partner rule's `holdAfterAbort`
 * keeps an aborted request's permit that many ms longer (or, `'typical'`, the gate's median hold).
 *
 * `reported`: the client's report, when it is a promise (a fetch body's `cancel()`); the wait
 * starts once it settles, either way. Resolves once the permit is back (with `holdAfterAbort`,
 * once its timer is set): limitFetch tells its caller of the end only then.
 */
export function releaseAfterTeardown(
  permit: Permit,
  reason: Extract<ReleaseReason, 'released' | 'aborted'>,
  reported?: Promise<unknown>,
): Promise<void> {
  const tornDown =
    reported === undefined ? afterNextPoll() : reported.then(afterNextPoll, afterNextPoll);
  return tornDown.then(() => release(permit, reason));
}

/**
 * Resolves in the check phase after the next poll phase: the first `setImmediate` runs after the
 * poll the caller may be in, the second after the one that follows.
 */
function afterNextPoll(): Promise<void> {
  return new Promise((resolve) => setImmediate(setImmediate, resolve));
}

function release(permit: Permit, reason: 'released' | 'aborted'): void {
  const holdMs = reason === 'aborted' ? holdAfterAbortOf(permit.gate) : 0;
  if (holdMs > 0) afterAtLeast(holdMs, () => releaseAs(permit, reason));
  else permit.release(reason);
}

function releaseAs(permit: Permit, reason: 'released' | 'aborted'): void {
  permit.release(reason);
}
