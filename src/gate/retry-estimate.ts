/**
 * The gate's Retry-After estimate: when a caller arriving now could be served, from its place
 * in the queue and the hold times the gate has measured.
 */
import { MAX_RETRY_AFTER_MS } from './semaphore-options.js';

/**
 * Ms until a caller at `position` in the queue (1: next) could be served: the `limit` holders
 * release at about one per `holdMs / limit`, so `position / limit` hold times. `holdMs`: the
 * measured hold estimate; unmeasured (`undefined`), the wait deadline stands in for one.
 * Clamped to [1 ms, MAX_RETRY_AFTER_MS].
 */
export function retryAfterEstimate(
  position: number,
  limit: number,
  holdMs: number | undefined,
  queueTimeout: number,
): number {
  const ms = Math.ceil((position / limit) * (holdMs ?? queueTimeout));
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(1, ms));
}
