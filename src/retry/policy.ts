/** Retry policy: options, defaults (with the reason for each number), validation, and backoff. */

import {
  checkKnownKeys,
  checkObject,
  describe,
  MAX_TIMER_MS,
  nonNegativeInteger,
} from '../common/options.js';
import { MAX_RETRY_AFTER_MS } from '../gate/semaphore.js';

/**
 * Default `retries`: 2, so at most 3 attempts per call — the ceiling Google SRE recommends
 * ("Addressing Cascading Failures"); more attempts multiply load exactly when a partner is
 * least able to take it.
 */
export const DEFAULT_RETRIES = 2;
/** Default `baseDelay`: 100 ms, the first backoff window (full jitter: a random wait in [0, 100)). */
export const DEFAULT_BASE_DELAY_MS = 100;
/** Default `maxDelay`: 2 s, the largest backoff window; with 3 attempts it is never reached. */
export const DEFAULT_MAX_DELAY_MS = 2_000;
/**
 * Default `maxRetryAfter`: 5 s. A partner asking for a longer pause is down for longer than a
 * caller on a request path should wait; its answer (with its `Retry-After`) goes back to the
 * caller to relay, rather than a retry that arrives before the partner asked.
 */
export const DEFAULT_MAX_RETRY_AFTER_MS = 5_000;
/**
 * Default `maxRetryTime`: 10 s from the first attempt; no retry starts (nor a backoff that
 * would end) after it. Well inside the ~30 s timeouts common at clients and load balancers,
 * leaving room for the last attempt itself.
 */
export const DEFAULT_MAX_RETRY_TIME_MS = 10_000;
/** Default `budgetPercent`: 20, Envoy's retry budget (`budget_percent`). */
export const DEFAULT_BUDGET_PERCENT = 20;
/** Default `minRetryConcurrency`: 3, Envoy's floor (`min_retry_concurrency`) for quiet partners. */
export const DEFAULT_MIN_RETRY_CONCURRENCY = 3;
/** Default `maxCooldown`: 60 s, the same clamp as `retryAfterMs`: a longer hint is a guess. */
export const DEFAULT_MAX_COOLDOWN_MS = MAX_RETRY_AFTER_MS;

/** Methods safe to send twice (RFC 9110 §9.2.2), less TRACE. */
export const DEFAULT_RETRY_METHODS: readonly string[] = Object.freeze([
  'GET',
  'HEAD',
  'OPTIONS',
  'PUT',
  'DELETE',
]);
/** Answers that mean "not now" rather than "not this": rate limited, bad gateway, unavailable, gateway timeout. */
export const DEFAULT_RETRY_STATUSES: readonly number[] = Object.freeze([429, 502, 503, 504]);
export const DEFAULT_IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

export interface CooldownOptions {
  /** Longest pause one `Retry-After` can impose on a partner, in ms (default 60 000). */
  maxCooldown?: number;
}

/** The knobs that may differ per partner. */
export interface RetryPolicyOptions {
  /** Retries after the first attempt (default 2: at most 3 attempts). */
  retries?: number;
  /** Upper bound of the first backoff window, in ms (default 100); it doubles per retry. */
  baseDelay?: number;
  /** Largest backoff window, in ms (default 2000). */
  maxDelay?: number;
  /**
   * Longest `Retry-After` honoured, in ms (default 5000). A partner asking for longer gets no
   * retry from us: the call ends with its answer. We never retry sooner than it asked.
   */
  maxRetryAfter?: number;
  /** No retry starts, and no backoff ends, later than this many ms after the first attempt (default 10 000). */
  maxRetryTime?: number;
  /** Methods retried without an idempotency key (default GET, HEAD, OPTIONS, PUT, DELETE). */
  methods?: readonly string[];
  /** Statuses retried (default 429, 502, 503, 504). A 4xx other than 429 is refused: it will not change. */
  statuses?: readonly number[];
  /** A request carrying this header is retried whatever its method (default `idempotency-key`). */
  idempotencyKeyHeader?: string;
  /** Concurrent retries allowed, as a percentage of the partner's active + queued requests (default 20). */
  budgetPercent?: number;
  /** Concurrent retries always allowed, however quiet the partner (default 3). */
  minRetryConcurrency?: number;
  /**
   * After a 429/503 with `Retry-After`, shed new calls to this partner with a
   * `PartnerCooldownError` until then, instead of letting every caller hit it (default off).
   */
  cooldown?: boolean | CooldownOptions;
}

/** A policy with every default applied. */
export interface RetryPolicy {
  readonly retries: number;
  readonly baseDelay: number;
  readonly maxDelay: number;
  readonly maxRetryAfter: number;
  readonly maxRetryTime: number;
  readonly methods: ReadonlySet<string>;
  readonly statuses: ReadonlySet<number>;
  readonly idempotencyKeyHeader: string;
  readonly budgetPercent: number;
  readonly minRetryConcurrency: number;
  /** Longest cooldown in ms, or `undefined` when cooldown is off. */
  readonly maxCooldown: number | undefined;
}

export const POLICY_KEYS = [
  'retries',
  'baseDelay',
  'maxDelay',
  'maxRetryAfter',
  'maxRetryTime',
  'methods',
  'statuses',
  'idempotencyKeyHeader',
  'budgetPercent',
  'minRetryConcurrency',
  'cooldown',
] as const;

const DEFAULT_POLICY: RetryPolicy = Object.freeze({
  retries: DEFAULT_RETRIES,
  baseDelay: DEFAULT_BASE_DELAY_MS,
  maxDelay: DEFAULT_MAX_DELAY_MS,
  maxRetryAfter: DEFAULT_MAX_RETRY_AFTER_MS,
  maxRetryTime: DEFAULT_MAX_RETRY_TIME_MS,
  methods: new Set(DEFAULT_RETRY_METHODS),
  statuses: new Set(DEFAULT_RETRY_STATUSES),
  idempotencyKeyHeader: DEFAULT_IDEMPOTENCY_KEY_HEADER,
  budgetPercent: DEFAULT_BUDGET_PERCENT,
  minRetryConcurrency: DEFAULT_MIN_RETRY_CONCURRENCY,
  maxCooldown: undefined,
});

/** Applies `options` over `base` (the defaults, or the retrier-wide policy for a partner override). */
export function resolvePolicy(
  where: string,
  options: RetryPolicyOptions | undefined,
  base: RetryPolicy = DEFAULT_POLICY,
): RetryPolicy {
  if (options === undefined) return base;
  const o = options;
  return {
    retries:
      o.retries === undefined ? base.retries : nonNegativeInteger(`${where}retries`, o.retries),
    baseDelay: o.baseDelay === undefined ? base.baseDelay : delay(`${where}baseDelay`, o.baseDelay),
    maxDelay: o.maxDelay === undefined ? base.maxDelay : delay(`${where}maxDelay`, o.maxDelay),
    maxRetryAfter:
      o.maxRetryAfter === undefined
        ? base.maxRetryAfter
        : delay(`${where}maxRetryAfter`, o.maxRetryAfter),
    maxRetryTime:
      o.maxRetryTime === undefined
        ? base.maxRetryTime
        : delay(`${where}maxRetryTime`, o.maxRetryTime),
    methods: o.methods === undefined ? base.methods : methods(`${where}methods`, o.methods),
    statuses: o.statuses === undefined ? base.statuses : statuses(`${where}statuses`, o.statuses),
    idempotencyKeyHeader:
      o.idempotencyKeyHeader === undefined
        ? base.idempotencyKeyHeader
        : headerName(`${where}idempotencyKeyHeader`, o.idempotencyKeyHeader),
    budgetPercent:
      o.budgetPercent === undefined
        ? base.budgetPercent
        : percent(`${where}budgetPercent`, o.budgetPercent),
    minRetryConcurrency:
      o.minRetryConcurrency === undefined
        ? base.minRetryConcurrency
        : nonNegativeInteger(`${where}minRetryConcurrency`, o.minRetryConcurrency),
    maxCooldown:
      o.cooldown === undefined ? base.maxCooldown : cooldown(`${where}cooldown`, o.cooldown),
  };
}

/**
 * Full-jitter exponential backoff (AWS Architecture Blog, "Exponential Backoff and Jitter"):
 * a uniform wait in [0, min(maxDelay, baseDelay × 2^(retry−1))). Spreading callers over the
 * whole window, not around its edge, is what keeps a herd from re-arriving together.
 */
export function backoffDelay(policy: RetryPolicy, retry: number, random: () => number): number {
  const window = Math.min(policy.maxDelay, policy.baseDelay * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * window);
}

export function checkPolicyKeys(where: string, options: object, extra: readonly string[]): void {
  checkKnownKeys(where, options, [...POLICY_KEYS, ...extra]);
}

function delay(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_TIMER_MS) {
    throw new TypeError(
      `${name} must be a duration in ms from 0 to ${MAX_TIMER_MS}, got ${describe(value)}`,
    );
  }
  return value;
}

function percent(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > 100) {
    throw new TypeError(`${name} must be a percentage from 0 to 100, got ${describe(value)}`);
  }
  return value;
}

function methods(name: string, value: unknown): ReadonlySet<string> {
  if (!Array.isArray(value) || value.some((m) => typeof m !== 'string' || m === '')) {
    throw new TypeError(`${name} must be an array of HTTP method names, got ${describe(value)}`);
  }
  return new Set(value.map((m: string) => m.toUpperCase()));
}

function statuses(name: string, value: unknown): ReadonlySet<number> {
  if (!Array.isArray(value)) {
    throw new TypeError(`${name} must be an array of HTTP status codes, got ${describe(value)}`);
  }
  for (const code of value) {
    if (typeof code !== 'number' || !Number.isInteger(code) || code < 400 || code > 599) {
      throw new TypeError(`${name} must hold 4xx/5xx status codes, got ${describe(code)}`);
    }
    if (code < 500 && code !== 429) {
      throw new TypeError(
        `${name}: ${code} will not succeed on a retry; of the 4xx statuses only 429 is retried`,
      );
    }
  }
  return new Set(value as number[]);
}

function headerName(name: string, value: unknown): string {
  if (typeof value !== 'string' || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value)) {
    throw new TypeError(`${name} must be an HTTP header name, got ${describe(value)}`);
  }
  return value.toLowerCase();
}

function cooldown(name: string, value: unknown): number | undefined {
  if (value === false) return undefined;
  if (value === true) return DEFAULT_MAX_COOLDOWN_MS;
  checkObject(name, value);
  checkKnownKeys(name, value, ['maxCooldown']);
  const { maxCooldown } = value as CooldownOptions;
  if (maxCooldown === undefined) return DEFAULT_MAX_COOLDOWN_MS;
  const ms = delay(`${name}.maxCooldown`, maxCooldown);
  if (ms === 0) throw new TypeError(`${name}.maxCooldown must be greater than 0, got 0`);
  return ms;
}
