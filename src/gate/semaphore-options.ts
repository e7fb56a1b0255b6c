/** The Semaphore's options, stats and defaults, each number with its reason. */
import type { DurationHistogram, DurationSummary } from '../common/histogram.js';
import {
  checkKnownKeys,
  checkObject,
  durationMs,
  optionalString,
  positiveInteger,
} from '../common/options.js';
import { parseQueueOrder } from './queue-order.js';
import { type LocalRateOptions, type RateStats, type ResolvedRate, resolveRate } from './rate.js';
import { type PriorityClassOptions, type PriorityClassStats, queueBound } from './wait-queue.js';

/**
 * Default wait deadline: 1 s. A wait is worth it only while it is shorter than the call it
 * waits for and well inside a user's patience; Netflix's LifoBlockingLimiter uses the same
 * 1 s backlog timeout. Longer waits turn overload into a timeout storm (see the seed text).
 */
export const DEFAULT_QUEUE_TIMEOUT_MS = 1000;
/**
 * Default queue bound: 10 waiters per permit. A waiter at position q is served after about
 * q / limit hold times; past 10 it would be served only if calls took under a tenth of the
 * wait deadline, so deeper waiters mostly wait only to time out while holding memory.
 */
export const DEFAULT_QUEUE_PER_PERMIT = 10;
/** `retryAfterMs` is clamped to [1 ms, 60 s]: a hint past a minute is a guess, not an estimate. */
export const MAX_RETRY_AFTER_MS = 60_000;

export interface SemaphoreOptions {
  /** Permits: the real, known concurrency cap this gate stands for. A positive integer. */
  limit: number;
  /**
   * Waiters beyond the held permits; 0 sheds at once when full. Default `10 × limit`: right
   * for a gate in front of a partner, where a deeper waiter would only time out. For batch
   * work (a job queue, a migration) pass `Infinity`: every call waits its turn.
   */
  maxQueue?: number;
  /** Wait deadline in ms (per call override: `acquire({ timeout })`). Default 1000. */
  queueTimeout?: number;
  /**
   * Longest a permit may go without progress, in ms: since its grant or its request's last
   * `noteProgress()` (the HTTP layers note response headers and every body chunk). Past it the
   * permit's `onHoldTimeout` hook runs (the HTTP layers abort the request there) and the permit
   * returns to the gate. A stream that keeps sending keeps its permit; an unread body does not.
   * Unset: no bound at this level; the HTTP layers always set one.
   */
  maxHold?: number;
  /**
   * Longest a permit may be held at all, in ms, progress or not: for partners that count a
   * long stream against you. Unset by default. Costs one timer per permit.
   */
  maxHoldTotal?: number;
  /**
   * Priority classes, highest first, each with a guaranteed minimum share of the permits
   * while it waits (shares add up to at most 1), FIFO within a class, and its own queue bound
   * and wait deadline. Callers name theirs with `{ priority }`; unnamed, the first. When the
   * queue is full, a caller sheds the newest waiter of the lowest class below its own.
   *
   * @example
   * priorities: [{ name: 'interactive', share: 0.8 }, { name: 'batch', share: 0.2, maxQueue: 50 }]
   */
  priorities?: PriorityClassOptions[];
  /**
   * A request rate beside the concurrency cap (GCRA): at most `limit + burst` calls (cost
   * units) in any window of `per` ms. A call takes its permit and its rate slot at the same
   * point of the same queue: the head is granted when a permit is free and its slot has come.
   * A caller whose wait deadline comes before its slot could is shed at once
   * (`RateLimitedError`, with an exact `retryAfterMs`). Unset: no rate, and no cost for one.
   *
   * @example
   * rate: { limit: 100, per: 1000, burst: 20 } // 100/s sustained, at most 120 in any second
   */
  rate?: LocalRateOptions;
  /** Gate name, used in errors and stats (the partner name in a HostLimiter). */
  name?: string;
  /**
   * A permit without progress for longer than this (ms) is a leak suspect (`leakSuspects`,
   * `detectLeaks`). Default: half of `maxHold`; unset with no `maxHold`.
   */
  leakWarnAfter?: number;
  /**
   * `'fifo'` (default: the order callers asked in) or `'adaptive-lifo'`: newest first while
   * the oldest waiter has waited `lifoAfter` ms (the queue stands), FIFO otherwise.
   */
  queueOrder?: 'fifo' | 'adaptive-lifo';
  /** With `'adaptive-lifo'`: the standing-queue age in ms (default 100). */
  lifoAfter?: number;
  /** Clock in ms; defaults to `performance.now`. Inject one to test without global fake timers. */
  now?: () => number;
  /**
   * Measure from construction: wait and hold histograms, the hold estimate behind
   * `retryAfterMs`, progress and a clock reading per permit. Default: from construction when
   * `maxHold`, `maxHoldTotal` or `leakWarnAfter` is set (every HostLimiter gate), else from the
   * first `stats()`, `waitTimes`/`holdTimes`, leak detector or metrics registration. An
   * unobserved gate reads no clock and records no sample per permit.
   */
  observe?: boolean;
}

/** Options of {@link Semaphore.tryAcquire} (a bare number is the weight). */
export interface TryAcquireOptions {
  /** Units of the limit to take (default 1). */
  weight?: number | undefined;
  /** Units of the gate's rate to take (default 1), see {@link WaitOptions.cost}. */
  cost?: number | undefined;
  /** The priority class the permit counts for (default the first). */
  priority?: string | undefined;
}

export interface AcquireOptions extends WaitOptions {
  /** Aborting it while waiting rejects with `signal.reason` and frees the queue slot at once. */
  signal?: AbortSignal | undefined;
}

/** Options of {@link Semaphore.wait}, and the part of `acquire`/`run` options they share. */
export interface WaitOptions {
  /** This call's wait deadline in ms, instead of the gate's `queueTimeout`. */
  timeout?: number | undefined;
  /**
   * The priority class to wait in (a name from the gate's `priorities`; default the first).
   */
  priority?: string | undefined;
  /**
   * Units of the limit to hold (default 1), with Go `semaphore.Weighted` semantics: FIFO, a
   * heavy waiter at the head is served before anyone behind it, and a weight above the limit
   * is refused at once (RangeError).
   */
  weight?: number | undefined;
  /**
   * Units of the gate's `rate` this call takes (default 1; a non-negative finite number, at
   * most `rate.burst + 1`): for budgets in tokens or credits. Settle the real cost afterwards
   * with `permit.settleCost(n)`. A TypeError on a gate without a rate.
   */
  cost?: number | undefined;
}

export type { LocalRateOptions, RateOptions, RateStats } from './rate.js';
export type { PriorityClassOptions, PriorityClassStats } from './wait-queue.js';

export interface SemaphoreStats {
  name: string | undefined;
  limit: number;
  held: number;
  /** `limit - held`, never negative: `held + available === limit` while `held <= limit`. */
  available: number;
  queued: number;
  maxQueue: number;
  queueTimeout: number;
  acquired: number;
  released: number;
  shedQueueFull: number;
  shedQueueTimeout: number;
  abortedWaiting: number;
  /** Permits released because their request was aborted in flight (`release('aborted')`). */
  abortedInFlight: number;
  /** Permits the gate took back after `maxHold`. */
  holdTimeouts: number;
  /** `release()` calls on a permit already released: counted, never an extra permit. */
  doubleReleases: number;
  /** Time from `acquire()` to grant, over every granted permit (0 for an immediate grant). */
  wait: DurationSummary;
  /** Time from grant to release. */
  hold: DurationSummary;
  /** Per priority class, when the gate has `priorities`. */
  priorities?: Record<string, PriorityClassStats>;
  /** The rate's state (next slot, backlog), when the gate has a `rate`. */
  rate?: RateStats;
}

/** A {@link DurationHistogram} to read, not to record into. */
export type DurationHistogramView = Pick<
  DurationHistogram,
  'count' | 'quantile' | 'cumulative' | 'summary'
>;

const SEMAPHORE_KEYS = [
  'limit',
  'maxQueue',
  'queueTimeout',
  'maxHold',
  'maxHoldTotal',
  'name',
  'leakWarnAfter',
  'now',
  'queueOrder',
  'lifoAfter',
  'priorities',
  'observe',
  'rate',
] as const;

/** {@link SemaphoreOptions} checked, with the defaults filled in. */
export interface ResolvedSemaphoreOptions {
  limit: number;
  maxQueue: number;
  queueTimeout: number;
  maxHold: number | undefined;
  maxHoldTotal: number | undefined;
  name: string | undefined;
  leakWarnAfter: number | undefined;
  now: (() => number) | undefined;
  /** Adaptive LIFO's standing-queue age (ms); `undefined`: FIFO (queue-order.ts). */
  lifoAfter: number | undefined;
  observe: boolean;
  rate: ResolvedRate | undefined;
}

/** Checks a Semaphore's options: a TypeError naming the option and the value for bad input. */
export function resolveSemaphoreOptions(options: SemaphoreOptions): ResolvedSemaphoreOptions {
  checkObject('Semaphore options', options);
  checkKnownKeys('Semaphore', options, SEMAPHORE_KEYS);
  const limit = positiveInteger('limit', options.limit);
  const optionalMs = (name: string, value: unknown): number | undefined =>
    value === undefined ? undefined : durationMs(name, value);
  if (options.now !== undefined && typeof options.now !== 'function') {
    throw new TypeError('now must be a function returning milliseconds');
  }
  if (options.observe !== undefined && typeof options.observe !== 'boolean') {
    throw new TypeError(`observe must be a boolean, got ${typeof options.observe}`);
  }
  return {
    limit,
    maxQueue:
      options.maxQueue === undefined
        ? limit * DEFAULT_QUEUE_PER_PERMIT
        : queueBound('maxQueue', options.maxQueue),
    queueTimeout: optionalMs('queueTimeout', options.queueTimeout) ?? DEFAULT_QUEUE_TIMEOUT_MS,
    maxHold: optionalMs('maxHold', options.maxHold),
    maxHoldTotal: optionalMs('maxHoldTotal', options.maxHoldTotal),
    name: optionalString('name', options.name),
    leakWarnAfter: optionalMs('leakWarnAfter', options.leakWarnAfter),
    now: options.now,
    lifoAfter: parseQueueOrder(options.queueOrder, options.lifoAfter),
    observe: options.observe === true,
    rate: options.rate === undefined ? undefined : resolveRate('rate', options.rate, true),
  };
}
