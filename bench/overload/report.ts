/**
 * Turns run records into the numbers the report shows, in the seed's time base: a run at time
 * scale s (service 40·s ms, timeout 500·s ms) reports durations as measured / s and rates as
 * measured · s. Time to shed and bytes are not simulated quantities and are never scaled.
 */

import { formatBytes, formatMs } from '../lib/stats.js';
import { markdownTable } from '../lib/table.js';
import {
  CONTENDER_LABEL,
  type ContenderKind,
  ERROR,
  OK,
  type RunResult,
  SHED_FULL,
  SHED_TIMEOUT,
  TIMEOUT,
} from './driver.js';

/** The first seed's table "10,000 tasks, N permits". */
export const SEED_ROWS = [
  { permits: 1, goodput: 25, meanMs: 43, timeoutPct: 0 },
  { permits: 5, goodput: 125, meanMs: 43, timeoutPct: 0 },
  { permits: 10, goodput: 250, meanMs: 43, timeoutPct: 0 },
  { permits: 25, goodput: 625, meanMs: 43, timeoutPct: 0 },
  { permits: 50, goodput: 1000, meanMs: 53, timeoutPct: 0 },
  { permits: 100, goodput: 1000, meanMs: 103, timeoutPct: 0 },
  { permits: 200, goodput: 1000, meanMs: 203, timeoutPct: 0 },
  { permits: 350, goodput: 1000, meanMs: 353, timeoutPct: 0 },
  { permits: 500, goodput: 0, meanMs: 503, timeoutPct: 100 },
] as const;

export const SEED_TASKS = 10_000;
/** Allowed relative deviation from the seed's goodput and mean call latency. */
export const TOLERANCE = 0.15;

export interface Summary {
  kind: ContenderKind;
  permits: number;
  tasks: number;
  ok: number;
  timeouts: number;
  shedFull: number;
  shedTimeout: number;
  errors: number;
  errorSample: string | undefined;
  /** Successful calls per second (seed time base). */
  goodput: number;
  /** Call latency, from dispatch, over every dispatched call (seed ms). */
  callMean: number;
  callP99: number;
  /** End-to-end (caller's wait + call) over every dispatched (admitted) caller (seed ms). */
  e2eMean: number;
  e2eP99: number;
  e2eMax: number;
  /** Real ms a caller refused at the deadline waited (p99), seed ms. */
  shedWaitP99: number;
  /** Arrival to rejection for callers refused because the queue was full: REAL ms, not scaled. */
  shedFullRealP50: number;
  shedFullRealP99: number;
  timeoutPct: number;
  /** Failed (timeouts + errors + shed) per 10,000 callers. */
  failedPer10k: number;
  wallMs: number;
  /** First to last arrival, real ms (not scaled: it is this process's CPU time). */
  arrivalMs: number;
  peakWaiting: number;
  peakLimiterQueued: number;
  peakHeapDelta: number | undefined;
  partnerPeakOpen: number;
  partnerPeakQueue: number;
  partnerWasted: number;
  partnerConnections: number;
  partnerPeakConnections: number;
  clientElu: number;
  clientCpu: number;
  complete: boolean;
  problems: string[];
}

export function quantile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1]!;
}

function mean(xs: ArrayLike<number>): number {
  if (xs.length === 0) return Number.NaN;
  let sum = 0;
  for (let i = 0; i < xs.length; i++) sum += xs[i]!;
  return sum / xs.length;
}

export function summarize(result: RunResult, scale: number): Summary {
  const { run } = result;
  const call: number[] = [];
  const e2e: number[] = [];
  const shedWait: number[] = [];
  const shedFullTimes: number[] = [];
  let ok = 0;
  let timeouts = 0;
  let shedFull = 0;
  let shedTimeout = 0;
  let errors = 0;
  for (let i = 0; i < run.n; i++) {
    const outcome = run.outcome[i];
    if (outcome === OK) ok++;
    else if (outcome === TIMEOUT) timeouts++;
    else if (outcome === SHED_FULL) {
      shedFull++;
      shedFullTimes.push(run.end[i]! - run.start[i]!);
    } else if (outcome === SHED_TIMEOUT) {
      shedTimeout++;
      shedWait.push(run.end[i]! - run.start[i]!);
    } else if (outcome === ERROR || outcome === 0) errors++;
    if (run.sent[i]! > 0 && run.end[i]! > 0) {
      call.push(run.end[i]! - run.sent[i]!);
      e2e.push(run.end[i]! - run.start[i]!);
    }
  }
  call.sort((a, b) => a - b);
  e2e.sort((a, b) => a - b);
  shedWait.sort((a, b) => a - b);
  shedFullTimes.sort((a, b) => a - b);
  const seed = (ms: number) => ms / scale;
  const failed = timeouts + errors + shedFull + shedTimeout;
  return {
    kind: result.kind,
    permits: result.permits,
    tasks: run.n,
    ok,
    timeouts,
    shedFull,
    shedTimeout,
    errors,
    errorSample: run.errorSample,
    goodput: result.wallMs > 0 ? (ok / result.wallMs) * 1000 * scale : 0,
    callMean: seed(mean(call)),
    callP99: seed(quantile(call, 0.99)),
    e2eMean: seed(mean(e2e)),
    e2eP99: seed(quantile(e2e, 0.99)),
    e2eMax: seed(e2e.length ? e2e[e2e.length - 1]! : Number.NaN),
    shedWaitP99: seed(quantile(shedWait, 0.99)),
    shedFullRealP50: quantile(shedFullTimes, 0.5),
    shedFullRealP99: quantile(shedFullTimes, 0.99),
    timeoutPct: call.length ? (100 * timeouts) / call.length : 0,
    failedPer10k: (failed * SEED_TASKS) / run.n,
    wallMs: result.wallMs,
    arrivalMs: result.arrivalMs,
    peakWaiting: run.peakWaiting,
    peakLimiterQueued: result.peakLimiterQueued,
    peakHeapDelta: result.peakHeapDelta,
    partnerPeakOpen: result.partner.peakOpen,
    partnerPeakQueue: result.partner.peakQueue,
    partnerWasted: result.partner.servedAbandoned,
    partnerConnections: result.partner.connections,
    partnerPeakConnections: result.partner.peakConnections,
    clientElu: result.clientElu,
    clientCpu: result.clientCpu,
    complete: result.complete,
    problems: result.problems,
  };
}

// --- formatting -----------------------------------------------------------------------------

export const int = (x: number) =>
  Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : 'n/a';
const rate = (x: number) => (Number.isFinite(x) ? `${Math.round(x)}/s` : 'n/a');
const ms = (x: number) => formatMs(x);
const pct = (x: number) =>
  Number.isFinite(x) ? `${x.toFixed(x === 100 || x === 0 ? 0 : 1)}%` : 'n/a';
const signed = (x: number) =>
  Number.isFinite(x) ? `${x >= 0 ? '+' : '−'}${Math.abs(x * 100).toFixed(0)}%` : 'n/a';
const failedOf10k = (x: number) => (x >= 1000 ? `${(x / 1000).toFixed(1)}K` : int(x));
/** Seed-time durations past a second read better in seconds. */
const dur = (x: number) => ms(x);

export function seedRow(permits: number) {
  return SEED_ROWS.find((row) => row.permits === permits);
}

export interface Check {
  permits: number;
  kind: ContenderKind;
  goodputDelta: number;
  meanDelta: number;
  pass: boolean;
  note: string;
}

/**
 * ±15% on goodput and mean call latency against the seed. At 500 permits the seed's goodput
 * is 0: there "the same collapse" means timeouts ≥ 85% and goodput ≤ 15% of the partner's
 * 1,000/s (the same ±15%, taken on the full scale, since 15% of zero is zero).
 */
export function checkAgainstSeed(s: Summary): Check | undefined {
  const seed = seedRow(s.permits);
  if (seed === undefined) return undefined;
  const meanDelta = s.callMean / seed.meanMs - 1;
  if (seed.goodput === 0) {
    const pass = s.timeoutPct >= 85 && s.goodput <= 150 && Math.abs(meanDelta) <= TOLERANCE;
    return {
      permits: s.permits,
      kind: s.kind,
      goodputDelta: Number.NaN,
      meanDelta,
      pass,
      note: `collapse: ${pct(s.timeoutPct)} timeouts, ${rate(s.goodput)}`,
    };
  }
  const goodputDelta = s.goodput / seed.goodput - 1;
  const pass = Math.abs(goodputDelta) <= TOLERANCE && Math.abs(meanDelta) <= TOLERANCE;
  return { permits: s.permits, kind: s.kind, goodputDelta, meanDelta, pass, note: '' };
}

const R = 'right' as const;
const L = 'left' as const;

/** The seed's columns plus p99, end-to-end and shed, one row per permits value. */
export function contenderTable(rows: readonly Summary[]): string {
  return markdownTable(
    [
      'permits',
      'goodput',
      'mean latency',
      'timeouts',
      'failed of 10K',
      'p99 latency',
      'e2e mean',
      'e2e p99',
      'shed',
      'tasks run',
    ],
    rows.map((s) => [
      String(s.permits),
      rate(s.goodput),
      dur(s.callMean),
      pct(s.timeoutPct),
      failedOf10k(s.failedPer10k),
      dur(s.callP99),
      dur(s.e2eMean),
      dur(s.e2eP99),
      int(s.shedFull + s.shedTimeout),
      s.tasks === SEED_TASKS ? int(s.tasks) : `${int(s.tasks)}*`,
    ]),
    [R, R, R, R, R, R, R, R, R, R],
  );
}

export function seedCheckTable(summaries: readonly Summary[], kinds: readonly ContenderKind[]) {
  const permits = [...new Set(summaries.map((s) => s.permits))];
  const headers = ['permits', 'seed goodput', 'seed mean'];
  for (const kind of kinds) headers.push(`${shortLabel(kind)}: goodput Δ`, 'mean Δ');
  const rows = permits.map((n) => {
    const seed = seedRow(n);
    const row = [String(n), seed ? rate(seed.goodput) : '–', seed ? `${seed.meanMs} ms` : '–'];
    for (const kind of kinds) {
      const s = summaries.find((x) => x.permits === n && x.kind === kind);
      const check = s ? checkAgainstSeed(s) : undefined;
      if (check === undefined) row.push('–', '–');
      else {
        const mark = check.pass ? '✓' : '✗';
        row.push(
          Number.isNaN(check.goodputDelta)
            ? `${rate(s!.goodput)}, ${pct(s!.timeoutPct)} t/o ${mark}`
            : `${signed(check.goodputDelta)} ${mark}`,
          signed(check.meanDelta),
        );
      }
    }
    return row;
  });
  return markdownTable(
    headers,
    rows,
    headers.map((_, i) => (i === 0 ? R : R)),
  );
}

export function shortLabel(kind: ContenderKind): string {
  return {
    'p-limit': 'p-limit',
    undici: 'undici',
    hostgate: 'hostgate',
    'hostgate-bounded': 'hostgate bounded',
  }[kind];
}

/** Burst, end to end: what the last callers see, unbounded vs bounded. */
export function burstTable(summaries: readonly Summary[], deadlineSeedMs: number): string {
  const permits = [...new Set(summaries.map((s) => s.permits))];
  const rows: string[][] = [];
  for (const n of permits) {
    for (const s of summaries.filter((x) => x.permits === n)) {
      const bounded = s.kind === 'hostgate-bounded';
      const bound = deadlineSeedMs + s.callP99;
      rows.push([
        String(n),
        CONTENDER_LABEL[s.kind],
        int(s.ok),
        dur(s.e2eMean),
        dur(s.e2eP99),
        dur(s.e2eMax),
        bounded ? `${dur(bound)} ${s.e2eP99 <= bound ? '✓' : '✗'}` : '–',
        bounded ? `${int(s.shedFull)} + ${int(s.shedTimeout)}` : '0',
        bounded && s.shedFull > 0 ? `${us(s.shedFullRealP50)} / ${us(s.shedFullRealP99)}` : '–',
        bounded && s.shedTimeout > 0 ? dur(s.shedWaitP99) : '–',
        `${s.arrivalMs.toFixed(0)} ms`,
      ]);
    }
  }
  return markdownTable(
    [
      'permits',
      'limiter',
      'served',
      'e2e mean',
      'e2e p99',
      'e2e max',
      'bound: deadline + call p99',
      'shed: queue full + at deadline',
      'queue-full shed p50 / p99 (real)',
      'deadline shed wait p99',
      'arrived in',
    ],
    rows,
    [R, L, R, R, R, R, R, R, R, R, R],
  );
}

export function openLoopTable(summaries: readonly Summary[], bytes: Map<ContenderKind, number>) {
  return markdownTable(
    [
      'limiter',
      'arrivals',
      'served',
      'goodput',
      'call p99',
      'e2e p99',
      'shed',
      'timeouts',
      'peak queued',
      'bytes / waiter',
      'peak queue memory',
    ],
    summaries.map((s) => {
      const perWaiter = bytes.get(s.kind);
      return [
        CONTENDER_LABEL[s.kind],
        int(s.tasks),
        int(s.ok),
        rate(s.goodput),
        dur(s.callP99),
        dur(s.e2eP99),
        int(s.shedFull + s.shedTimeout),
        int(s.timeouts),
        int(s.peakLimiterQueued),
        perWaiter === undefined ? 'n/a' : formatBytes(perWaiter),
        perWaiter === undefined ? 'n/a' : formatBytes(s.peakLimiterQueued * perWaiter),
      ];
    }),
    [L, R, R, R, R, R, R, R, R, R, R],
  );
}

/** Microseconds with two significant decimals, for time to shed. */
export function us(msValue: number): string {
  return `${(msValue * 1000).toFixed(msValue < 0.01 ? 1 : 0)} µs`;
}
