/**
 * The gate's Retry-After estimate: when a caller arriving now could be served, from its place
 * in the queue and the hold times the gate has measured.
 */
import { DEFAULT_QUEUE_PER_PERMIT, MAX_RETRY_AFTER_MS } from './semaphore-options.js';

/**
 * Ms until a caller at `position` in the queue (1: next) could be served: the `limit` holders
 * release at about one per `holdMs / limit`, so `position / limit` hold times, clamped to
 * [1 ms, MAX_RETRY_AFTER_MS].
 *
 * With no hold measured yet (`holdMs` undefined: a fresh gate's first burst), the hold time
 * the gate's own bounds were sized for stands in: `queueTimeout × limit / maxQueue`, the hold
 * at which a full queue drains exactly within the wait deadline (100 ms with the defaults:
 * 10 waiters a permit, 1 s). And no more than `queueTimeout`: every caller queued now has been
 * served or shed by then. (The wait deadline itself as the hold time said "retry after 10.1 s"
 * for 10 ms tasks, issue 23.)
 */
export function retryAfterEstimate(
  position: number,
  limit: number,
  holdMs: number | undefined,
  queueTimeout: number,
  maxQueue: number,
): number {
  let ms: number;
  if (holdMs !== undefined) ms = (position / limit) * holdMs;
  else {
    const perPermit =
      maxQueue > 0 && Number.isFinite(maxQueue) ? maxQueue / limit : DEFAULT_QUEUE_PER_PERMIT;
    ms = Math.min(queueTimeout, (position / limit) * (queueTimeout / perPermit));
  }
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, Math.ceil(ms)));
}
