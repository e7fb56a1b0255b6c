/**
 * The gate's Retry-After estimate: when a caller arriving now could be served, from its place
 * in the queue and the hold times the gate has measured.
 */
import type { Holders } from './holders.js';
import { MAX_RETRY_AFTER_MS } from './semaphore-options.js';

/** Holders read for the oldest one's age: a bounded walk, on a shed only. */
const AGE_WALK = 64;

/**
 * Ms until a caller at `position` in the queue (1: next) could be served: the `limit` holders
 * release at about one per `holdMs / limit`, so `position / limit` hold times, clamped to
 * [1 ms, MAX_RETRY_AFTER_MS].
 *
 * With no hold measured yet (`holdMs` undefined: a fresh gate's first burst), the age of the
 * oldest call in flight stands in (`oldestAgeMs`): its hold is at least that, so the estimate
 * starts low and grows while the first holds run on, and no more than `queueTimeout`: every
 * caller queued now has been served or shed by then. What it never follows is the deadline:
 * the hold the bounds were sized for (`queueTimeout × limit / maxQueue`) said "retry after 10 s"
 * for a queue of 100 ms calls that drained in 0.32 s (issue 33), and the deadline itself "10.1 s"
 * for 10 ms tasks (issue 23).
 */
export function retryAfterEstimate(
  position: number,
  limit: number,
  holdMs: number | undefined,
  queueTimeout: number,
  oldestAgeMs = 0,
): number {
  const ms =
    holdMs !== undefined
      ? (position / limit) * holdMs
      : Math.min(queueTimeout, (position / limit) * oldestAgeMs);
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, Math.ceil(ms)));
}

/** Ms since the oldest grant among the first holders (0: none held, or none stamped yet). */
export function oldestHoldAge(holders: Holders, now: number): number {
  let oldest = now;
  let seen = 0;
  for (let p = holders.oldest; p !== undefined && seen < AGE_WALK; p = p.next, seen++) {
    if (p.acquiredAt < oldest) oldest = p.acquiredAt; // NaN (unobserved) never compares less
  }
  return now - oldest;
}
