/**
 * The rows of the metrics, one per label (a partner, an origin, `(other origins)`): their shape,
 * and how one is read from the label's live gates and the running totals the collector keeps.
 */

import { controllerOf } from '../adaptive/signals.js';
import { coreEntry } from '../gate/counting-gate.js';
import type { Semaphore } from '../gate/semaphore.js';
import {
  ABORTED_IN_FLIGHT,
  ABORTED_WAITING,
  ACQUIRED,
  BREAKER_OPENED,
  type BucketCounts,
  bucketCounts,
  CLASS_ABORTED_WAITING,
  CLASS_ACQUIRED,
  CLASS_SHED_FULL,
  CLASS_SHED_TIMEOUT,
  CLASS_WAIT_BUCKETS,
  CLASS_WAIT_COUNT,
  CLASS_WAIT_SUM,
  DOUBLE_RELEASES,
  HOLD_BUCKETS,
  HOLD_BUCKETS_SECONDS,
  HOLD_COUNT,
  HOLD_SUM,
  HOLD_TIMEOUTS,
  RELEASED,
  RETRIES,
  SHED_BREAKER_OPEN,
  SHED_DEADLINE,
  SHED_FULL,
  SHED_PARTNER_HOLD,
  SHED_RATE_LIMITED,
  SHED_STORE_UNAVAILABLE,
  SHED_TIMEOUT,
  WAIT_BUCKETS,
  WAIT_BUCKETS_SECONDS,
  WAIT_COUNT,
  WAIT_SUM,
  windowQuantile,
} from './gate-totals.js';

/** A breaker's state as a number (`hostgate_breaker_state`): 0 closed, 1 half-open, 2 open. */
export const BREAKER_STATE_VALUES = Object.freeze({ closed: 0, 'half-open': 1, open: 2 } as const);

/** One row: a partner, an origin, or `(other origins)`. */
export interface PartnerMetrics {
  partner: string;
  /** Live gates behind this row (0 when only counters remain, e.g. after an eviction). */
  gates: number;
  /** The limit in force: an adaptive partner's effective limit. */
  limit: number;
  /** The contract limit: the ceiling of an adaptive limit, else equal to `limit`. */
  contractLimit: number;
  /** Times an adaptive limit changed (0 for a fixed one). */
  limitChanges: number;
  /** The limit adapts to the partner (`adaptive` option). */
  adaptive: boolean;
  held: number;
  available: number;
  queued: number;
  maxQueue: number;
  acquired: number;
  released: number;
  shedQueueFull: number;
  shedQueueTimeout: number;
  /** Calls refused before queueing because their request's deadline could not be met. */
  shedDeadline: number;
  /** Shared gates: calls refused with `StoreUnavailableError` (`onStoreError: 'reject'`). */
  shedStoreUnavailable: number;
  /** Calls refused with `PartnerCooldownError`: the partner's hold outlasted their wait deadline. */
  shedPartnerHold: number;
  /** Calls refused with `PartnerOpenError`: the partner's breaker was open. */
  shedBreakerOpen: number;
  /** Calls refused with `RateLimitedError`: their rate slot came after their wait deadline. */
  shedRateLimited: number;
  /**
   * Ms left of the partner's own hold (rate-limit headers, a retrier's Retry-After): no call goes
   * before it ends. `null` when the rule reads no headers and has no breaker.
   */
  partnerHoldMs: number | null;
  /** The partner's breaker (`breaker` option): its state and how often it opened; `null` without one. */
  breaker: { state: 'closed' | 'open' | 'half-open'; opened: number } | null;
  abortedWaiting: number;
  abortedInFlight: number;
  holdTimeouts: number;
  doubleReleases: number;
  retries: number;
  wait: BucketCounts;
  hold: BucketCounts;
  /** Span (s) of the window the two rates below cover: since the oldest read of the last minute. */
  windowSeconds: number;
  /** Shed calls (every `shed*` reason above) per second over the window. */
  shedPerSecond: number;
  /**
   * p99 queue wait over the window, ms: interpolated in its bucket, and never above
   * `waitMaxMs` (a bucket's bound is no wait anyone had); `null` with no grants in it.
   */
  waitP99Ms: number | null;
  /** The longest queue wait a live gate of this row granted, ms (0: none yet); since it was made. */
  waitMaxMs: number;
  /** The longest permit hold a live gate of this row saw returned, ms (0: none yet). */
  holdMaxMs: number;
  /** Permits held past their gate's `leakWarnAfter` now. */
  leakSuspects: number;
  /** Ms since the holders last showed progress (grant, release, response bytes); `null` if none held. */
  quietMs: number | null;
  /** Exhausted (no permit free) and quiet for `stallAfter`: the leak signature. */
  stalled: boolean;
  /**
   * A gate shared by every replica (`hostgate/redis`): the whole cluster's view, as of its last
   * Redis answer. The fields above are this process's. `null` for a local gate.
   */
  shared: SharedPartnerMetrics | null;
  /**
   * Per priority class (label `priority_class`), for a partner with `priorities`: the part of
   * `queued`, `acquired`, `shedQueueFull`, `shedQueueTimeout`, `abortedWaiting` and `wait`
   * that class accounts for (they add up to the partner's). `null` without classes.
   */
  priorities: Record<string, PriorityClassMetrics> | null;
}

/** One priority class of a partner. */
export interface PriorityClassMetrics {
  queued: number;
  acquired: number;
  shedQueueFull: number;
  shedQueueTimeout: number;
  abortedWaiting: number;
  wait: BucketCounts;
}

/** The cluster-wide numbers of a shared partner. */
export interface SharedPartnerMetrics {
  /** Permits held by every process together. */
  held: number;
  /** Callers of every process waiting in Redis. */
  queued: number;
  /** Processes that used the gate within a lease. */
  processes: number;
  /** Redis answers; false while the store's `onStoreError` policy is in force. */
  storeUp: boolean;
  /** Leases Redis lost while this process held them (stalls, a Redis restart). */
  leasesLost: number;
  /** Leased mode (`sharing: 'leased'`): this process's block of the cap; `null` in FIFO mode. */
  block: number | null;
  /** Leased mode: this process's demand as last sent to Redis; `null` in FIFO mode. */
  demand: number | null;
}

/** What a shared gate's `stats()` adds (read by shape: metrics do not import hostgate/redis). */
interface SharedStatsView {
  held: number;
  queued: number;
  processes: number;
  mode: string;
  leasesLost: number;
  sharing?: string;
  block?: number;
  demand?: number;
}

/** A label's totals at an earlier read: the start of its rate window. */
export interface Sample {
  at: number;
  totals: Float64Array;
}

/** What a row is read from. */
export interface RowSource {
  label: string;
  /** The live gates behind the label (none after an eviction). */
  gates: Semaphore[];
  /** The label's running totals. */
  totals: Float64Array;
  /** Its per-class totals, when its gates have `priorities`. */
  classTotals: Map<string, Float64Array> | undefined;
  /** The oldest sample inside the window (none at the first read). */
  base: Sample | undefined;
  /** Now, on the collector's clock. */
  now: number;
  /** Permits of the label held past their `leakWarnAfter` now. */
  leaks: number;
  /** Exhausted with no progress for this long (ms) is stalled. */
  stallAfter: number;
}

/**
 * One row of metrics: the label's running totals, and the live gates behind it read now (limits,
 * holders, queue, the partner's hold and breaker, the cluster's view of a shared gate).
 */
export function partnerRow(source: RowSource): PartnerMetrics {
  const { label, gates, totals, base, now, leaks, stallAfter } = source;
  let limit = 0;
  let contractLimit = 0;
  let limitChanges = 0;
  let adaptive = false;
  let held = 0;
  let available = 0;
  let queued = 0;
  let maxQueue = 0;
  let quietMs: number | null = null;
  let stalled = false;
  let waitMaxMs = 0;
  let holdMaxMs = 0;
  let shared: SharedPartnerMetrics | null = null;
  let partnerHoldMs: number | null = null;
  let breaker: PartnerMetrics['breaker'] = null;
  for (const gate of gates) {
    const guard = coreEntry.guardOf(gate)?.counters();
    if (guard !== undefined) {
      partnerHoldMs = Math.max(partnerHoldMs ?? 0, guard.holdRemainingMs);
      if (guard.breakerState !== undefined) {
        breaker = { state: guard.breakerState, opened: totals[BREAKER_OPENED]! };
      }
    }
    limit += gate.limit;
    const controlled = controllerOf(gate)?.stats();
    contractLimit += controlled?.contractLimit ?? gate.limit;
    limitChanges += controlled?.limitChanges ?? 0;
    adaptive ||= controlled !== undefined;
    held += gate.held;
    available += gate.available;
    queued += gate.queued;
    const stats = gate.stats();
    maxQueue += stats.maxQueue;
    waitMaxMs = Math.max(waitMaxMs, stats.wait.maxMs);
    holdMaxMs = Math.max(holdMaxMs, stats.hold.maxMs);
    const view = (stats as { shared?: SharedStatsView }).shared;
    if (view !== undefined) {
      shared ??= {
        held: 0,
        queued: 0,
        processes: 0,
        storeUp: true,
        leasesLost: 0,
        block: null,
        demand: null,
      };
      if (view.sharing === 'leased') {
        shared.block = (shared.block ?? 0) + (view.block ?? 0);
        shared.demand = (shared.demand ?? 0) + (view.demand ?? 0);
      }
      shared.held += view.held;
      shared.queued += view.queued;
      shared.processes = Math.max(shared.processes, view.processes);
      shared.storeUp &&= view.mode === 'redis';
      shared.leasesLost += view.leasesLost;
    }
    if (gate.held === 0) continue;
    const quiet = gate.now() - gate.lastProgressAt;
    quietMs = quietMs === null ? quiet : Math.max(quietMs, quiet);
    if (gate.available === 0 && quiet >= stallAfter) stalled = true;
  }
  const windowMs = base === undefined ? 0 : now - base.at;
  const shed = (v: Float64Array) =>
    v[SHED_FULL]! +
    v[SHED_TIMEOUT]! +
    v[SHED_DEADLINE]! +
    v[SHED_STORE_UNAVAILABLE]! +
    v[SHED_PARTNER_HOLD]! +
    v[SHED_BREAKER_OPEN]! +
    v[SHED_RATE_LIMITED]!;
  return {
    partner: label,
    gates: gates.length,
    limit,
    contractLimit,
    limitChanges,
    adaptive,
    held,
    available,
    queued,
    maxQueue,
    acquired: totals[ACQUIRED]!,
    released: totals[RELEASED]!,
    shedQueueFull: totals[SHED_FULL]!,
    shedQueueTimeout: totals[SHED_TIMEOUT]!,
    shedDeadline: totals[SHED_DEADLINE]!,
    shedStoreUnavailable: totals[SHED_STORE_UNAVAILABLE]!,
    shedPartnerHold: totals[SHED_PARTNER_HOLD]!,
    shedBreakerOpen: totals[SHED_BREAKER_OPEN]!,
    shedRateLimited: totals[SHED_RATE_LIMITED]!,
    partnerHoldMs,
    breaker,
    abortedWaiting: totals[ABORTED_WAITING]!,
    abortedInFlight: totals[ABORTED_IN_FLIGHT]!,
    holdTimeouts: totals[HOLD_TIMEOUTS]!,
    doubleReleases: totals[DOUBLE_RELEASES]!,
    retries: totals[RETRIES]!,
    wait: bucketCounts(totals, WAIT_COUNT, WAIT_SUM, WAIT_BUCKETS, WAIT_BUCKETS_SECONDS.length),
    hold: bucketCounts(totals, HOLD_COUNT, HOLD_SUM, HOLD_BUCKETS, HOLD_BUCKETS_SECONDS.length),
    windowSeconds: windowMs / 1000,
    shedPerSecond:
      base === undefined || windowMs <= 0
        ? 0
        : (shed(totals) - shed(base.totals)) / (windowMs / 1000),
    waitP99Ms: windowP99(totals, base, gates.length > 0 ? waitMaxMs : undefined),
    waitMaxMs,
    holdMaxMs,
    leakSuspects: leaks,
    quietMs,
    stalled,
    shared,
    priorities: classRow(source.classTotals, gates),
  };
}

/** The per-class part of a row: totals of the label, queue depth of its live gates. */
function classRow(
  byClass: Map<string, Float64Array> | undefined,
  gates: Semaphore[],
): Record<string, PriorityClassMetrics> | null {
  if (byClass === undefined) return null;
  const out: Record<string, PriorityClassMetrics> = {};
  for (const [name, v] of byClass) {
    out[name] = {
      queued: 0,
      acquired: v[CLASS_ACQUIRED]!,
      shedQueueFull: v[CLASS_SHED_FULL]!,
      shedQueueTimeout: v[CLASS_SHED_TIMEOUT]!,
      abortedWaiting: v[CLASS_ABORTED_WAITING]!,
      wait: bucketCounts(
        v,
        CLASS_WAIT_COUNT,
        CLASS_WAIT_SUM,
        CLASS_WAIT_BUCKETS,
        WAIT_BUCKETS_SECONDS.length,
      ),
    };
  }
  for (const gate of gates) {
    for (const [name, c] of Object.entries(gate.stats().priorities ?? {})) {
      const row = out[name];
      if (row !== undefined) row.queued += c.queued;
    }
  }
  return out;
}

/**
 * The window's p99 wait, clamped to the longest wait observed: a wait counted in its log bucket
 * and interpolated in a wide export bucket read 2,470 ms for a gate whose longest wait was 996
 * (issue 33). `maxMs` undefined: no live gate to ask (an evicted row), no clamp.
 */
function windowP99(
  totals: Float64Array,
  base: Sample | undefined,
  maxMs: number | undefined,
): number | null {
  if (base === undefined) return null;
  const p99 = windowQuantile(totals, base.totals, 0.99);
  return p99 === null || maxMs === undefined ? p99 : Math.min(p99, maxMs);
}
