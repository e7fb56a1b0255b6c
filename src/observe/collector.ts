/**
 * Per-partner numbers for exporters and the status page, read from the gates on demand
 * (a scrape, a page view): nothing runs between reads, and the gates pay nothing for it.
 *
 * Labels are bounded: a partner gate is always labelled with its name, the per-origin gates with
 * the most traffic with their origin, the rest `(other origins)` (origin-labels.ts).
 * Counters stay monotonic although per-origin gates come and go (the limiter evicts idle
 * ones): each read adds every live gate's increase since the previous read to its label's total.
 * Each row is read from those totals and the label's live gates (partner-metrics.ts).
 */

import {
  checkKnownKeys,
  checkObject,
  describe,
  durationMs,
  nonNegativeInteger,
} from '../common/options.js';
import { Semaphore } from '../gate/semaphore.js';
import {
  CLASS_VECTOR_LENGTH,
  RETRIES,
  readClasses,
  readGate,
  VECTOR_LENGTH,
} from './gate-totals.js';
import { findLeaks, type GateSource } from './leaks.js';
import {
  callsSince,
  DEFAULT_MAX_ORIGIN_LABELS,
  OriginLabels,
  OTHER_ORIGINS,
  OVERFLOW_ORIGINS,
} from './origin-labels.js';
import { type PartnerMetrics, partnerRow, type Sample } from './partner-metrics.js';

export { type BucketCounts, HOLD_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from './gate-totals.js';

export { DEFAULT_MAX_ORIGIN_LABELS, OTHER_ORIGINS, OVERFLOW_ORIGINS } from './origin-labels.js';
export {
  BREAKER_STATE_VALUES,
  type PartnerMetrics,
  type PriorityClassMetrics,
  type SharedPartnerMetrics,
} from './partner-metrics.js';

/**
 * Default `stallAfter`: 10 s. An exhausted gate whose holders got no response byte for that
 * long is the seed's leak signature (permits at zero, partner idle), or a partner that hangs.
 */
export const DEFAULT_STALL_AFTER_MS = 10_000;
/** Shed rate and p99 wait are measured over the reads of about the last minute. */
const WINDOW_MS = 60_000;
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

const COLLECTOR_KEYS = ['maxOriginLabels', 'stallAfter', 'retrier', 'now'] as const;

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
  readonly #stallAfter: number;
  readonly #retrier: RetryStatsSource | undefined;
  readonly #now: () => number;
  /** The per-origin gates labelled with their origin, by traffic. */
  readonly #originLabels: OriginLabels;
  /** Each live gate's counters at the previous read. */
  #lastByGate = new Map<Semaphore, Float64Array>();
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
    this.#originLabels = new OriginLabels(
      options.maxOriginLabels === undefined
        ? DEFAULT_MAX_ORIGIN_LABELS
        : nonNegativeInteger('maxOriginLabels', options.maxOriginLabels),
    );
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

  /** Gives the origin labels of the next read; the series of a label given up ends. */
  #rankOrigins(calls: Map<string, number>, now: number): void {
    for (const label of this.#originLabels.rank(calls, now)) {
      this.#totals.delete(label);
      this.#samples.delete(label);
      this.#classTotals.delete(label);
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
      out.push(
        partnerRow({
          label,
          gates,
          totals,
          classTotals: this.#classTotals.get(label),
          base,
          now,
          leaks: suspects.get(label) ?? 0,
          stallAfter: this.#stallAfter,
        }),
      );
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
