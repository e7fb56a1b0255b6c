/**
 * Queue discipline under overload: FIFO while the queue drains, newest first once it has not
 * emptied for a while (adaptive LIFO, as Facebook and Netflix serve under load).
 *
 * The signal is CoDel's: a queue whose *oldest* waiter has waited `lifoAfter` ms has not been
 * empty for at least that long — it is not absorbing a burst, it is standing. Serving its
 * oldest waiters then serves exactly the callers most likely to have given up (their deadline is
 * nearest); serving the newest gives the call to someone who can still use it, and the old ones
 * leave at their own deadline. Once the queue drains below `lifoAfter` of age, FIFO returns.
 */
import { describe, durationMs } from '../common/options.js';

export type QueueOrder = 'fifo' | 'adaptive-lifo';

/**
 * Default `lifoAfter`: 100 ms, Facebook's CoDel interval ("Fail at Scale": a queue not empty for
 * the last 100 ms is overloaded). Far below the default 1 s wait deadline, far above a burst.
 */
export const DEFAULT_LIFO_AFTER_MS = 100;

/** The `lifoAfter` in force, or `undefined` for plain FIFO. */
export function parseQueueOrder(order: unknown, lifoAfter: unknown): number | undefined {
  if (order === undefined || order === 'fifo') {
    if (lifoAfter !== undefined) {
      throw new TypeError(
        `lifoAfter needs queueOrder: 'adaptive-lifo', got queueOrder ${describe(order)}`,
      );
    }
    return undefined;
  }
  if (order !== 'adaptive-lifo') {
    throw new TypeError(`queueOrder must be 'fifo' or 'adaptive-lifo', got ${describe(order)}`);
  }
  return lifoAfter === undefined ? DEFAULT_LIFO_AFTER_MS : durationMs('lifoAfter', lifoAfter);
}

/** The waiter to serve next: the oldest, or the newest while the queue stands. */
export function nextWaiter<W extends { readonly enqueuedAt: number }>(
  head: W,
  tail: W,
  now: number,
  lifoAfter: number | undefined,
): W {
  return lifoAfter !== undefined && now - head.enqueuedAt >= lifoAfter ? tail : head;
}
