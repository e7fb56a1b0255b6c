/**
 * A partner rule's breaker: closed → open when the partner fails too many calls (a run of
 * consecutive failures, as cockatiel's ConsecutiveBreaker, or a failure ratio over a sliding
 * window with a minimum of calls, as its SamplingBreaker and Envoy's outlier detection); open →
 * half-open after `halfOpenAfterMs`; half-open lets `probes` calls through: the first outcome
 * closes it (a success) or opens it again (a failure). Clock readings are the gate's (ms).
 */
import { PartnerOpenError } from '../common/errors.js';
import { checkKnownKeys, checkObject, describe, positiveInteger } from '../common/options.js';

/** A partner rule's `breaker` option. Either rule (or both) may open it. */
export interface BreakerOptions {
  /** Consecutive failures that open it (cockatiel's ConsecutiveBreaker). Default 5 unless `threshold` is set. */
  failures?: number;
  /** Failure ratio in (0, 1] over `windowMs` that opens it, once `minCalls` outcomes are in the window. */
  threshold?: number;
  /** Outcomes the window needs before `threshold` applies (default 20). */
  minCalls?: number;
  /** The sampling window, ms (default 10 000). */
  windowMs?: number;
  /** How long it stays open before letting probes through, ms (default 5 000). */
  halfOpenAfterMs?: number;
  /** Calls let through while half-open (default 1). */
  probes?: number;
  /**
   * Response statuses that count as failures (default every 5xx). A 429 never does: it is the
   * partner's rate signal (see `rateLimitHeaders`), not a sign that it is down.
   */
  statuses?: number[];
}

/** The breaker's state and counters, in a partner's stats. */
export interface BreakerStats {
  state: 'closed' | 'open' | 'half-open';
  /** Times it opened (re-opening from half-open included). */
  opened: number;
  /** Calls shed because it was open (or half-open with every probe out). */
  shed: number;
  /** Failures in a row now. */
  consecutiveFailures: number;
  /** Failures and outcomes in the sampling window now (both 0 without `threshold`). */
  windowFailures: number;
  windowCalls: number;
  /** Ms until it lets probes through; 0 unless open. */
  halfOpenInMs: number;
}

export const DEFAULT_BREAKER_FAILURES = 5;
export const DEFAULT_BREAKER_MIN_CALLS = 20;
export const DEFAULT_BREAKER_WINDOW_MS = 10_000;
export const DEFAULT_HALF_OPEN_AFTER_MS = 5_000;
const BUCKETS = 10;
const KEYS = [
  'failures',
  'threshold',
  'minCalls',
  'windowMs',
  'halfOpenAfterMs',
  'probes',
  'statuses',
] as const;

interface ResolvedBreaker {
  failures: number | undefined;
  threshold: number | undefined;
  minCalls: number;
  windowMs: number;
  halfOpenAfterMs: number;
  probes: number;
  statuses: ReadonlySet<number> | undefined;
}

const CLOSED = 0;
const OPEN = 1;
const HALF_OPEN = 2;
const STATE_NAMES = ['closed', 'open', 'half-open'] as const;

export class Breaker {
  readonly #o: ResolvedBreaker;
  readonly #partner: string;
  #state = CLOSED;
  #opened = 0;
  #shed = 0;
  #consecutive = 0;
  /** Open: when probes may go. Half-open: when unanswered probes count as lost. */
  #until = 0;
  #probesOut = 0;
  #why = '';
  /** Sampling window: per bucket, its index in time, outcomes and failures. */
  readonly #bucketAt: number[] = [];
  readonly #calls: number[] = [];
  readonly #fails: number[] = [];

  constructor(partner: string, options: ResolvedBreaker) {
    this.#partner = partner;
    this.#o = options;
    if (options.threshold !== undefined) {
      for (let i = 0; i < BUCKETS; i++) {
        this.#bucketAt.push(-1);
        this.#calls.push(0);
        this.#fails.push(0);
      }
    }
  }

  /** Whether every arrival must be asked about (not closed). */
  get screening(): boolean {
    return this.#state !== CLOSED;
  }

  /** Refuses an arrival while open, or half-open with every probe out; lets probes through. */
  refuse(now: number): PartnerOpenError | undefined {
    if (this.#state === CLOSED) return undefined;
    if (this.#state === OPEN) {
      if (now < this.#until) return this.#refusal(this.#until - now);
      this.#state = HALF_OPEN;
      this.#probesOut = 0;
      this.#until = now + this.#o.halfOpenAfterMs;
    } else if (now >= this.#until) {
      // Probes that never reported (shed on the way, aborted by their caller): send new ones.
      this.#probesOut = 0;
      this.#until = now + this.#o.halfOpenAfterMs;
    }
    if (this.#probesOut < this.#o.probes) {
      this.#probesOut++;
      return undefined;
    }
    return this.#refusal(this.#until - now);
  }

  /** The partner answered with `statusCode` at `now`. */
  onResponse(statusCode: number, now: number): void {
    if (statusCode === 429) return;
    const statuses = this.#o.statuses;
    const failed = statuses === undefined ? statusCode >= 500 : statuses.has(statusCode);
    if (failed) this.onFailure(now, `HTTP ${statusCode}`);
    else this.onSuccess(now);
  }

  onSuccess(now: number): void {
    if (this.#state === OPEN) return; // a call from before it opened: says nothing of now
    if (this.#state === HALF_OPEN) this.#close();
    this.#consecutive = 0;
    this.#record(now, false);
  }

  /** A failure: a 5xx (or a listed status), a connection error, a timeout. */
  onFailure(now: number, why: string): void {
    if (this.#state === OPEN) return;
    if (this.#state === HALF_OPEN) {
      this.#open(now, `a probe failed: ${why}`);
      return;
    }
    this.#consecutive++;
    const [calls, fails] = this.#record(now, true);
    const o = this.#o;
    if (o.failures !== undefined && this.#consecutive >= o.failures) {
      this.#open(now, `${this.#consecutive} failures in a row, the last ${why}`);
    } else if (o.threshold !== undefined && calls >= o.minCalls && fails / calls >= o.threshold) {
      this.#open(now, `${fails} of ${calls} calls failed in ${o.windowMs} ms, the last ${why}`);
    }
  }

  stats(now: number): BreakerStats {
    const [calls, fails] = this.#window(now);
    return {
      state: STATE_NAMES[this.#state]!,
      opened: this.#opened,
      shed: this.#shed,
      consecutiveFailures: this.#consecutive,
      windowFailures: fails,
      windowCalls: calls,
      halfOpenInMs: this.#state === OPEN ? Math.max(0, Math.ceil(this.#until - now)) : 0,
    };
  }

  #refusal(retryAfterMs: number): PartnerOpenError {
    this.#shed++;
    return new PartnerOpenError(this.#partner, Math.max(1, Math.ceil(retryAfterMs)), this.#why);
  }

  #open(now: number, why: string): void {
    this.#state = OPEN;
    this.#opened++;
    this.#until = now + this.#o.halfOpenAfterMs;
    this.#why = why;
  }

  #close(): void {
    this.#state = CLOSED;
    this.#consecutive = 0;
    this.#bucketAt.fill(-1);
  }

  /** Adds an outcome to the window; returns the window's [calls, failures] after it. */
  #record(now: number, failed: boolean): [number, number] {
    if (this.#o.threshold === undefined) return [0, 0];
    const at = Math.floor(now / (this.#o.windowMs / BUCKETS));
    const i = at % BUCKETS;
    if (this.#bucketAt[i] !== at) {
      this.#bucketAt[i] = at;
      this.#calls[i] = 0;
      this.#fails[i] = 0;
    }
    this.#calls[i]!++;
    if (failed) this.#fails[i]!++;
    return this.#window(now);
  }

  #window(now: number): [number, number] {
    if (this.#o.threshold === undefined) return [0, 0];
    const at = Math.floor(now / (this.#o.windowMs / BUCKETS));
    let calls = 0;
    let fails = 0;
    for (let i = 0; i < BUCKETS; i++) {
      const b = this.#bucketAt[i]!;
      if (b >= 0 && at - b < BUCKETS) {
        calls += this.#calls[i]!;
        fails += this.#fails[i]!;
      }
    }
    return [calls, fails];
  }
}

/** Checks a partner rule's `breaker` (`true`: every default); `undefined` for none. */
export function parseBreaker(where: string, value: unknown): ResolvedBreaker | undefined {
  if (value === undefined || value === false) return undefined;
  const o = (value === true ? {} : value) as BreakerOptions;
  checkObject(`${where}: breaker`, o);
  checkKnownKeys(`${where}: breaker`, o, KEYS);
  const name = (key: string): string => `${where}: breaker.${key}`;
  const threshold = o.threshold;
  if (
    threshold !== undefined &&
    !(typeof threshold === 'number' && threshold > 0 && threshold <= 1)
  ) {
    throw new RangeError(
      `${name('threshold')} must be a ratio in (0, 1], got ${describe(threshold)}`,
    );
  }
  const statuses = o.statuses;
  if (statuses !== undefined) {
    if (!Array.isArray(statuses) || statuses.length === 0) {
      throw new TypeError(
        `${name('statuses')} must be a non-empty array of HTTP statuses, got ${describe(statuses)}`,
      );
    }
    for (const s of statuses) {
      if (!Number.isInteger(s) || s < 100 || s > 599) {
        throw new RangeError(
          `${name('statuses')} must hold HTTP statuses (100-599), got ${describe(s)}`,
        );
      }
      if (s === 429) {
        throw new RangeError(
          `${name('statuses')} must not hold 429: it is the partner's rate signal (rateLimitHeaders holds calls on it), not a failure`,
        );
      }
    }
  }
  return {
    failures:
      o.failures === undefined
        ? threshold === undefined
          ? DEFAULT_BREAKER_FAILURES
          : undefined
        : positiveInteger(name('failures'), o.failures),
    threshold,
    minCalls:
      o.minCalls === undefined
        ? DEFAULT_BREAKER_MIN_CALLS
        : positiveInteger(name('minCalls'), o.minCalls),
    windowMs:
      o.windowMs === undefined
        ? DEFAULT_BREAKER_WINDOW_MS
        : positiveInteger(name('windowMs'), o.windowMs),
    halfOpenAfterMs:
      o.halfOpenAfterMs === undefined
        ? DEFAULT_HALF_OPEN_AFTER_MS
        : positiveInteger(name('halfOpenAfterMs'), o.halfOpenAfterMs),
    probes: o.probes === undefined ? 1 : positiveInteger(name('probes'), o.probes),
    statuses: statuses === undefined ? undefined : new Set(statuses),
  };
}
