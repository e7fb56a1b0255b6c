import type { ReleaseReason } from '../gate/diagnostics.js';
import type { Permit } from '../gate/semaphore.js';
import { holdAfterAbortOf } from '../partners/gate-layers.js';

/**
 * The one teardown policy of every HTTP entry point (limitHosts, limitGate, limitFetch): when a
 * request that reached the partner fails or is cancelled, its permit returns once the connection
 * is closed on our side — not before, or the next waiter could reach the partner while this
 * request is still open there.
 *
 * What tells us the connection is closed: undici reports a cancelled or failed request and tears
 * it down in one synchronous call (`abort` → `onError`, then `socket.destroy()`: the FIN or RST is
 * sent; over HTTP/2 the stream is reset), and the same holds when fetch's body is cancelled. The
 * permit returns in the microtask after that call: after the teardown, before any I/O. For
 * partners that keep working on a request after the client has gone, the partner rule's
 * `holdAfterAbort` keeps an aborted request's permit that many ms longer (or, `'typical'`, the
 * gate's median hold time).
 */
export function releaseAfterTeardown(
  permit: Permit,
  reason: Extract<ReleaseReason, 'released' | 'aborted'>,
): void {
  const holdMs = reason === 'aborted' ? holdAfterAbortOf(permit.gate) : 0;
  if (holdMs > 0) {
    setTimeout(releaseAborted, holdMs, permit).unref();
  } else {
    queueMicrotask(() => permit.release(reason));
  }
}

function releaseAborted(permit: Permit): void {
  permit.release('aborted');
}
