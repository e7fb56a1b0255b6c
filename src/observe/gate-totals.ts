/**
 * A gate's counters and histograms as one flat vector: cheap to read, subtract and add up,
 * which is all the collector does with them (per-gate increases summed into per-label totals).
 */

import { coreEntry } from '../gate/counting-gate.js';
import { deadlineShedCount } from '../gate/deadline.js';
import type { Semaphore, SemaphoreStats } from '../gate/semaphore.js';

/** Queue wait buckets (s): 0.1 ms catches immediate grants; the default wait deadline is 1 s. */
export const WAIT_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
]);
/** Permit hold buckets (s): API calls from 1 ms up to past the default `maxHold` of 60 s. */
export const HOLD_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
]);

/** A histogram as Prometheus wants it: cumulative counts at `WAIT_/HOLD_BUCKETS_SECONDS`. */
export interface BucketCounts {
  /** Cumulative count at each bound (a sample is counted at its log bucket's upper edge, ≤19% off). */
  buckets: number[];
  count: number;
  sumSeconds: number;
}

// Counter vector layout, per gate and per label.
export const ACQUIRED = 0;
export const RELEASED = 1;
export const SHED_FULL = 2;
export const SHED_TIMEOUT = 3;
export const ABORTED_WAITING = 4;
export const ABORTED_IN_FLIGHT = 5;
export const HOLD_TIMEOUTS = 6;
export const DOUBLE_RELEASES = 7;
export const RETRIES = 8;
export const SHED_DEADLINE = 9;
export const SHED_STORE_UNAVAILABLE = 10;
// A partner rule's guard (docs/contracts.md): its hold's and its breaker's sheds, breaker opens.
export const SHED_PARTNER_HOLD = 11;
export const SHED_BREAKER_OPEN = 12;
export const BREAKER_OPENED = 13;
/** A gate's request `rate` (docs/rates.md): calls whose slot came after their wait deadline. */
export const SHED_RATE_LIMITED = 14;
export const WAIT_COUNT = 15;
export const WAIT_SUM = 16;
export const HOLD_COUNT = 17;
export const HOLD_SUM = 18;
export const WAIT_BUCKETS = 19;
export const HOLD_BUCKETS = WAIT_BUCKETS + WAIT_BUCKETS_SECONDS.length;
export const VECTOR_LENGTH = HOLD_BUCKETS + HOLD_BUCKETS_SECONDS.length;
export const WAIT_BOUNDS_MS = WAIT_BUCKETS_SECONDS.map((s) => s * 1000);
export const HOLD_BOUNDS_MS = HOLD_BUCKETS_SECONDS.map((s) => s * 1000);

/** A gate's counters and histogram buckets now, in the layout above. */
export function readGate(gate: Semaphore, s: SemaphoreStats = gate.stats()): Float64Array {
  const v = new Float64Array(VECTOR_LENGTH);
  v[ACQUIRED] = s.acquired;
  v[RELEASED] = s.released;
  v[SHED_FULL] = s.shedQueueFull;
  v[SHED_TIMEOUT] = s.shedQueueTimeout;
  v[ABORTED_WAITING] = s.abortedWaiting;
  v[ABORTED_IN_FLIGHT] = s.abortedInFlight;
  v[HOLD_TIMEOUTS] = s.holdTimeouts;
  v[DOUBLE_RELEASES] = s.doubleReleases;
  v[SHED_DEADLINE] = deadlineShedCount(gate);
  // A shared gate (hostgate/redis) adds its own shed reason; read by shape, not imported.
  v[SHED_STORE_UNAVAILABLE] =
    (s as { shared?: { shedStoreUnavailable?: number } }).shared?.shedStoreUnavailable ?? 0;
  const guard = coreEntry.guardOf(gate)?.counters();
  if (guard !== undefined) {
    v[SHED_PARTNER_HOLD] = guard.shedHold;
    v[SHED_BREAKER_OPEN] = guard.shedOpen;
    v[BREAKER_OPENED] = guard.breakerOpened;
  }
  v[SHED_RATE_LIMITED] = s.rate?.shedRateLimited ?? 0;
  v[WAIT_COUNT] = s.wait.count;
  v[WAIT_SUM] = s.wait.sumMs / 1000;
  v[HOLD_COUNT] = s.hold.count;
  v[HOLD_SUM] = s.hold.sumMs / 1000;
  v.set(gate.waitTimes.cumulative(WAIT_BOUNDS_MS), WAIT_BUCKETS);
  v.set(gate.holdTimes.cumulative(HOLD_BOUNDS_MS), HOLD_BUCKETS);
  return v;
}

// Per priority class vector layout: the class-split counters and the class's wait histogram.
export const CLASS_ACQUIRED = 0;
export const CLASS_SHED_FULL = 1;
export const CLASS_SHED_TIMEOUT = 2;
export const CLASS_ABORTED_WAITING = 3;
export const CLASS_WAIT_COUNT = 4;
export const CLASS_WAIT_SUM = 5;
export const CLASS_WAIT_BUCKETS = 6;
export const CLASS_VECTOR_LENGTH = CLASS_WAIT_BUCKETS + WAIT_BUCKETS_SECONDS.length;

/** A gate's priority classes now (`undefined` for a gate without `priorities`), by name. */
export function readClasses(
  gate: Semaphore,
  s: SemaphoreStats = gate.stats(),
): Map<string, Float64Array> | undefined {
  const classes = s.priorities;
  if (classes === undefined) return undefined;
  const out = new Map<string, Float64Array>();
  for (const [name, c] of Object.entries(classes)) {
    const v = new Float64Array(CLASS_VECTOR_LENGTH);
    v[CLASS_ACQUIRED] = c.acquired;
    v[CLASS_SHED_FULL] = c.shedQueueFull;
    v[CLASS_SHED_TIMEOUT] = c.shedQueueTimeout;
    v[CLASS_ABORTED_WAITING] = c.abortedWaiting;
    v[CLASS_WAIT_COUNT] = c.wait.count;
    v[CLASS_WAIT_SUM] = c.wait.sumMs / 1000;
    v.set(gate.waitTimesOf(name).cumulative(WAIT_BOUNDS_MS), CLASS_WAIT_BUCKETS);
    out.set(name, v);
  }
  return out;
}

export function bucketCounts(
  totals: Float64Array,
  count: number,
  sum: number,
  first: number,
  length: number,
): BucketCounts {
  return {
    buckets: Array.from(totals.subarray(first, first + length)),
    count: totals[count]!,
    sumSeconds: totals[sum]!,
  };
}

/**
 * The q-quantile of queue waits between two reads, in ms, interpolated linearly inside its
 * bucket as Prometheus' `histogram_quantile` does; past the last bound, that bound.
 */
export function windowQuantile(now: Float64Array, base: Float64Array, q: number): number | null {
  const count = now[WAIT_COUNT]! - base[WAIT_COUNT]!;
  if (count <= 0) return null;
  const rank = q * count;
  let below = 0;
  let lower = 0;
  for (let i = 0; i < WAIT_BOUNDS_MS.length; i++) {
    const upper = WAIT_BOUNDS_MS[i]!;
    const seen = now[WAIT_BUCKETS + i]! - base[WAIT_BUCKETS + i]!;
    if (seen >= rank) {
      const inBucket = seen - below;
      return inBucket <= 0 ? upper : lower + ((upper - lower) * (rank - below)) / inBucket;
    }
    below = seen;
    lower = upper;
  }
  return WAIT_BOUNDS_MS[WAIT_BOUNDS_MS.length - 1]!;
}
