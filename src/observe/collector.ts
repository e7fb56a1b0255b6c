/**
 * Per-partner numbers for exporters and the status page, read from the gates on demand
 * (a scrape, a page view): nothing runs between reads, and the gates pay nothing for it.
 *
 * Labels are bounded: a partner gate is always labelled with its name; of the per-origin gates,
 * the `maxOriginLabels` origins with the most traffic (calls granted or shed, decaying with a
 * half-life of a minute) get their origin key, the rest `(other origins)`. By traffic, not by
 * arrival: a flood of one-call origins (URLs an attacker chooses) cannot take the labels of the
 * unnamed hosts a service really calls (issue 36). An origin whose traffic falls below half of
 * a newcomer's gives its label up; its series ends (its later calls count in `(other origins)`).
 * The overflow gate of a limiter past `maxHosts` is a label of its own.
 * Counters stay monotonic although per-origin gates come and go (the limiter evicts idle
 * ones): each read adds every live gate's increase since the previous read to its label's total.
 */

import { controllerOf } from '../adaptive/signals.js';
import {
  checkKnownKeys,
  checkObject,
  describe,
  durationMs,
  nonNegativeInteger,
} from '../common/options.js';
import { coreEntry } from '../gate/counting-gate.js';
import { Semaphore } from '../gate/semaphore.js';
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
  CLASS_VECTOR_LENGTH,
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
  readClasses,
  readGate,
  SHED_BREAKER_OPEN,
  SHED_DEADLINE,
  SHED_FULL,
  SHED_PARTNER_HOLD,
  SHED_RATE_LIMITED,
  SHED_STORE_UNAVAILABLE,
  SHED_TIMEOUT,
  VECTOR_LENGTH,
  WAIT_BUCKETS,
  WAIT_BUCKETS_SECONDS,
  WAIT_COUNT,
  WAIT_SUM,
  windowQuantile,
} from './gate-totals.js';
import { findLeaks, type GateSource } from './leaks.js';

export { type BucketCounts, HOLD_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from './gate-totals.js';

/** The label of per-origin gates past `maxOriginLabels` (the retry layer uses the same). */
export const OTHER_ORIGINS = '(other origins)';
/**
 * The stats key and gate name of a limiter's overflow gate: origins that found every
 * per-origin place taken share it (`HostLimiter`, `maxHosts`). A label of its own.
 */
export const OVERFLOW_ORIGINS = '(overflow origins)';
/** Default `maxOriginLabels`: enough to name the few unknown hosts a service really calls. */
export const DEFAULT_MAX_ORIGIN_LABELS = 20;
/**
 * Default `stallAfter`: 10 s. An exhausted gate whose holders got no response byte for that
 * long is the seed's leak signature (permits at zero, partner idle), or a partner that hangs.
 */
export const DEFAULT_STALL_AFTER_MS = 10_000;
/** Shed rate and p99 wait are measured over the reads of about the last minute. */
const WINDOW_MS = 60_000;
/** Half-life of an origin's traffic score, which picks the origins that get a label. */
const TRAFFIC_HALF_LIFE_MS = 60_000;
/** A newcomer takes the weakest origin label only with more than this many times its traffic. */
const RELABEL_MARGIN = 2;
const SAMPLE_SPACING_MS = 1000;

/** Anything with per-partner retry counts: hostgate's `Retrier` (`retrier.stats()`). */
export interface RetryStatsSource {
  stats(): Record<string, { retries: number }>;
}

export interface MetricsCollectorOptions {
  /** Per-origin gates that get a label of their own, by traffic (default 20); the rest share one. */
  maxOriginLabels?: number;
  /** Exhausted with no progress for this long (ms) marks a partner stalled (default 10 000). */
  stallAfter?: number;
  /** The retry layer's counters (`new Retrier(...)`), for `retries` per partner. */
  retrier?: RetryStatsSource;
  /** Clock in ms for rate windows (default `performance.now`). */
  now?: () => number;
}

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

const COLLECTOR_KEYS = ['maxOriginLabels', 'stallAfter', 'retrier', 'now'] as const;

interface Sample {
  at: number;
  totals: Float64Array;
}

interface Row {
  gates: Semaphore[];
}

/**
 * Reads a limiter's gates into per-partner rows; one per exporter or status page (it keeps
 * the running totals and the rate window of its own reads).
 *
 * @example
 * const collector = new MetricsCollector(limiter, { retrier });
 * for (const row of collector.collect()) console.log(row.partner, row.held, row.stalled);
 */
export class MetricsCollector {
  readonly #source: GateSource;
  readonly #maxOriginLabels: number;
  readonly #stallAfter: number;
  readonly #retrier: RetryStatsSource | undefined;
  readonly #now: () => number;
  /** Origins with a label of their own now (at most `maxOriginLabels`), picked by traffic. */
  readonly #originLabels = new Set<string>();
  /** Traffic score per origin (live per-origin gates and labelled origins only). */
  #originTraffic = new Map<string, number>();
  /** When (this collector's clock) the scores were last decayed. */
  #trafficAt: number | undefined = undefined;
  /** Each live gate's counters at the previous read. */
  #lastByGate = new Map<Semaphore, Float64Array>();
  /** Each live gate's progress ticks, and when (gate clock) this collector first saw them. */
  /** Retry counts by retrier key at the previous read. */
  #lastRetries = new Map<string, number>();
  /** Running totals per label: only ever grow. */
  readonly #totals = new Map<string, Float64Array>();
  /** Each live gate's per-class counters at the previous read. */
  #lastClassesByGate = new Map<Semaphore, Map<string, Float64Array>>();
  /** Running per-class totals per label (labels of gates with `priorities` only). */
  readonly #classTotals = new Map<string, Map<string, Float64Array>>();
  /** Totals per label at earlier reads, oldest first, for the window. */
  readonly #samples = new Map<string, Sample[]>();

  constructor(source: GateSource | Semaphore, options: MetricsCollectorOptions = {}) {
    this.#source = gateSource(source);
    checkObject('MetricsCollector options', options);
    checkKnownKeys('MetricsCollector', options, COLLECTOR_KEYS);
    this.#maxOriginLabels =
      options.maxOriginLabels === undefined
        ? DEFAULT_MAX_ORIGIN_LABELS
        : nonNegativeInteger('maxOriginLabels', options.maxOriginLabels);
    this.#stallAfter =
      options.stallAfter === undefined
        ? DEFAULT_STALL_AFTER_MS
        : durationMs('stallAfter', options.stallAfter);
    const retrier = options.retrier;
    if (retrier !== undefined && typeof retrier?.stats !== 'function') {
      throw new TypeError(
        `retrier must have a stats() method (a Retrier), got ${describe(retrier)}`,
      );
    }
    this.#retrier = retrier;
    if (options.now !== undefined && typeof options.now !== 'function') {
      throw new TypeError('now must be a function returning milliseconds');
    }
    this.#now = options.now ?? (() => performance.now());
    this.collect(); // the baseline the first window is measured from
  }

  /**
   * The label for a gate key: a partner's name, an origin key (of the origins with the most
   * traffic at the last read), or `(other origins)`.
   */
  labelFor(key: string, gate?: Semaphore): string {
    const source = this.#source;
    if (gate !== undefined && source.gate?.(key) === gate) return key;
    if (gate === undefined && source.gate?.(key) !== undefined) return key;
    if (key === OTHER_ORIGINS || key === OVERFLOW_ORIGINS || this.#originLabels.has(key)) {
      return key;
    }
    return OTHER_ORIGINS;
  }

  /** A per-origin gate's key (not a partner's, nor a shared row's). */
  #isOrigin(key: string, gate: Semaphore): boolean {
    return key !== OTHER_ORIGINS && key !== OVERFLOW_ORIGINS && this.#source.gate?.(key) !== gate;
  }

  /**
   * After a read: decays every origin's score, adds the calls each made since the previous read,
   * and gives the labels to the busiest. A newcomer takes the weakest label only with more than
   * {@link RELABEL_MARGIN} times its score, so two origins of equal traffic do not trade it at
   * every read; the label it takes over ends (its totals dropped: memory stays bounded).
   */
  #rankOrigins(calls: Map<string, number>, now: number): void {
    const elapsed = this.#trafficAt === undefined ? 0 : Math.max(0, now - this.#trafficAt);
    this.#trafficAt = now;
    const decay = 0.5 ** (elapsed / TRAFFIC_HALF_LIFE_MS);
    const scores = new Map<string, number>();
    for (const key of new Set([...calls.keys(), ...this.#originLabels])) {
      scores.set(key, (this.#originTraffic.get(key) ?? 0) * decay + (calls.get(key) ?? 0));
    }
    this.#originTraffic = scores;
    const labels = this.#originLabels;
    const candidates = [...scores]
      .filter(([key, score]) => score > 0 && !labels.has(key))
      .sort((a, b) => b[1] - a[1]);
    for (const [key, score] of candidates) {
      if (labels.size < this.#maxOriginLabels) {
        labels.add(key);
        continue;
      }
      let weakest: string | undefined;
      let weakestScore = Number.POSITIVE_INFINITY;
      for (const label of labels) {
        const s = scores.get(label) ?? 0;
        if (s < weakestScore) {
          weakest = label;
          weakestScore = s;
        }
      }
      if (weakest === undefined || score <= RELABEL_MARGIN * weakestScore) break; // sorted
      labels.delete(weakest);
      this.#totals.delete(weakest);
      this.#samples.delete(weakest);
      this.#classTotals.delete(weakest);
      labels.add(key);
    }
  }

  /** Reads every gate now: one row per label, partners first. */
  collect(): PartnerMetrics[] {
    const now = this.#now();
    const rows = new Map<string, Row>();
    const lastByGate = new Map<Semaphore, Float64Array>();
    const lastClassesByGate = new Map<Semaphore, Map<string, Float64Array>>();
    const originCalls = new Map<string, number>();
    for (const [key, gate] of this.#source.gates()) {
      const label = this.labelFor(key, gate);
      const stats = gate.stats();
      const current = readGate(gate, stats);
      if (this.#isOrigin(key, gate)) {
        originCalls.set(key, callsSince(current, this.#lastByGate.get(gate)));
      }
      this.#accumulate(label, current, this.#lastByGate.get(gate));
      lastByGate.set(gate, current);
      const classes = readClasses(gate, stats);
      if (classes !== undefined) {
        this.#accumulateClasses(label, classes, this.#lastClassesByGate.get(gate));
        lastClassesByGate.set(gate, classes);
      }
      const row = rows.get(label);
      if (row === undefined) rows.set(label, { gates: [gate] });
      else row.gates.push(gate);
    }
    // Gates gone since the last read (evicted) are forgotten; their totals stay in their label.
    this.#lastByGate = lastByGate;
    this.#lastClassesByGate = lastClassesByGate;
    this.#readRetries();
    this.#rankOrigins(originCalls, now); // the origin labels of the next read

    const suspects = new Map<string, number>();
    for (const { gate, suspect } of findLeaks(this.#source)) {
      const label = this.labelFor(suspect.partner, gate);
      suspects.set(label, (suspects.get(label) ?? 0) + 1);
    }

    const out: PartnerMetrics[] = [];
    for (const [label, totals] of this.#totals) {
      const gates = rows.get(label)?.gates ?? [];
      const base = this.#sample(label, totals, now);
      out.push(this.#row(label, gates, totals, base, now, suspects.get(label) ?? 0));
    }
    return out;
  }

  #totalsOf(label: string): Float64Array {
    let totals = this.#totals.get(label);
    if (totals === undefined) {
      totals = new Float64Array(VECTOR_LENGTH);
      this.#totals.set(label, totals);
    }
    return totals;
  }

  #accumulate(label: string, current: Float64Array, previous: Float64Array | undefined): void {
    const totals = this.#totalsOf(label);
    for (let i = 0; i < VECTOR_LENGTH; i++) {
      if (i === RETRIES) continue;
      totals[i]! += current[i]! - (previous?.[i] ?? 0);
    }
  }

  #accumulateClasses(
    label: string,
    current: Map<string, Float64Array>,
    previous: Map<string, Float64Array> | undefined,
  ): void {
    let byClass = this.#classTotals.get(label);
    if (byClass === undefined) {
      byClass = new Map();
      this.#classTotals.set(label, byClass);
    }
    for (const [name, vector] of current) {
      let totals = byClass.get(name);
      if (totals === undefined) {
        totals = new Float64Array(CLASS_VECTOR_LENGTH);
        byClass.set(name, totals);
      }
      const before = previous?.get(name);
      for (let i = 0; i < CLASS_VECTOR_LENGTH; i++) totals[i]! += vector[i]! - (before?.[i] ?? 0);
    }
  }

  /** The per-class part of a row: totals of the label, queue depth of its live gates. */
  #classRow(label: string, gates: Semaphore[]): Record<string, PriorityClassMetrics> | null {
    const byClass = this.#classTotals.get(label);
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

  #readRetries(): void {
    const retrier = this.#retrier;
    if (retrier === undefined) return;
    const last = new Map<string, number>();
    for (const [key, stats] of Object.entries(retrier.stats())) {
      const count = stats.retries;
      const before = this.#lastRetries.get(key) ?? 0;
      // A key whose state was dropped and re-created (an evicted gate) starts again from 0.
      const increase = count >= before ? count - before : count;
      last.set(key, count);
      if (increase === 0) continue; // no label taken for a key that never retried
      this.#totalsOf(this.labelFor(key))[RETRIES]! += increase;
    }
    this.#lastRetries = last;
  }

  /** Keeps one sample per second for the window; returns the oldest one inside it. */
  #sample(label: string, totals: Float64Array, now: number): Sample | undefined {
    let samples = this.#samples.get(label);
    if (samples === undefined) {
      samples = [];
      this.#samples.set(label, samples);
    }
    while (samples.length > 1 && now - samples[1]!.at >= WINDOW_MS) samples.shift();
    const base = samples[0];
    const newest = samples[samples.length - 1];
    if (newest === undefined || now - newest.at >= SAMPLE_SPACING_MS) {
      samples.push({ at: now, totals: totals.slice() });
    }
    return base;
  }

  #row(
    label: string,
    gates: Semaphore[],
    totals: Float64Array,
    base: Sample | undefined,
    now: number,
    leaks: number,
  ): PartnerMetrics {
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
      if (gate.available === 0 && quiet >= this.#stallAfter) stalled = true;
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
      priorities: this.#classRow(label, gates),
    };
  }
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

function gateSource(source: GateSource | Semaphore): GateSource {
  if (source instanceof Semaphore) {
    const gates = new Map([[source.name ?? 'default', source]]);
    return { gates: () => gates, gate: (name) => gates.get(name) };
  }
  if (typeof (source as GateSource | undefined)?.gates !== 'function') {
    throw new TypeError(`expected a HostLimiter or a Semaphore, got ${describe(source)}`);
  }
  return source;
}

/** Calls a gate granted or shed between two reads: the traffic that earns an origin its label. */
function callsSince(current: Float64Array, previous: Float64Array | undefined): number {
  let calls = 0;
  for (const i of [ACQUIRED, SHED_FULL, SHED_TIMEOUT]) calls += current[i]! - (previous?.[i] ?? 0);
  return calls;
}
