import { describe, expect, it } from 'vitest';
import {
  createRetrier,
  DEFAULT_BASE_DELAY_MS,
  DEFAULT_MAX_DELAY_MS,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  Retrier,
  type RetrierOptions,
  TooManyHostsError,
} from '../../src/index.js';
import { isRetryableError } from '../../src/retry/classify.js';
import { backoffDelay, resolvePolicy } from '../../src/retry/policy.js';

const fetchFailed = (cause?: unknown) => new TypeError('fetch failed', { cause });
const coded = (code: string, message = code) => Object.assign(new Error(message), { code });

describe('which failures are retried', () => {
  it('retries connection refused and reset, as errors or as the cause of "fetch failed"', () => {
    expect(isRetryableError(coded('ECONNREFUSED'))).toBe(true);
    expect(isRetryableError({ code: 'ECONNRESET', message: 'socket hang up' })).toBe(true);
    expect(isRetryableError(fetchFailed(coded('ECONNRESET')))).toBe(true);
    expect(isRetryableError(fetchFailed(coded('UND_ERR_SOCKET', 'other side closed')))).toBe(true);
    expect(isRetryableError(fetchFailed())).toBe(true);
  });

  it('never retries a shed error of our own gate, bare or wrapped by fetch', () => {
    const full = new QueueFullError('billing', 200, 1200);
    expect(isRetryableError(full)).toBe(false);
    expect(isRetryableError(fetchFailed(full))).toBe(false);
    expect(isRetryableError(new QueueTimeoutError('billing', 250, 900))).toBe(false);
    expect(isRetryableError(fetchFailed(new TooManyHostsError('http://x', 256, 5)))).toBe(false);
  });

  it('never retries our permit hold timeout, an abort or a timeout', () => {
    expect(isRetryableError(fetchFailed(new PermitHoldTimeoutError('billing', 60_000)))).toBe(
      false,
    );
    expect(isRetryableError(new DOMException('aborted', 'AbortError'))).toBe(false);
    expect(isRetryableError(fetchFailed(new DOMException('timed out', 'TimeoutError')))).toBe(
      false,
    );
  });

  it('does not retry what fails the same way every time, nor a bug', () => {
    expect(isRetryableError(fetchFailed(coded('ENOTFOUND')))).toBe(false);
    expect(isRetryableError(fetchFailed(coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE')))).toBe(false);
    expect(isRetryableError(new TypeError('Failed to parse URL from /relative'))).toBe(false);
    expect(isRetryableError(new Error('boom'))).toBe(false);
    expect(isRetryableError('boom')).toBe(false);
    expect(isRetryableError(undefined)).toBe(false);
  });
});

describe('backoff (full jitter)', () => {
  const policy = resolvePolicy('', {});

  it('waits a uniform random time within a window that doubles per retry', () => {
    expect(backoffDelay(policy, 1, () => 0)).toBe(0);
    expect(backoffDelay(policy, 1, () => 0.5)).toBe(DEFAULT_BASE_DELAY_MS / 2);
    expect(backoffDelay(policy, 2, () => 0.5)).toBe(DEFAULT_BASE_DELAY_MS);
    expect(backoffDelay(policy, 3, () => 0.999_999)).toBe(4 * DEFAULT_BASE_DELAY_MS - 1);
  });

  it('never opens the window past maxDelay', () => {
    expect(backoffDelay(policy, 30, () => 0.999_999)).toBe(DEFAULT_MAX_DELAY_MS - 1);
    const small = resolvePolicy('', { baseDelay: 10, maxDelay: 15 });
    expect(backoffDelay(small, 5, () => 0.5)).toBe(7);
  });
});

describe('retrier options', () => {
  const bad: [RetrierOptions, RegExp][] = [
    [{ retries: -1 }, /retries must be a non-negative integer, got -1/],
    [{ retries: 1.5 }, /retries must be a non-negative integer, got 1.5/],
    [{ baseDelay: Number.NaN }, /baseDelay must be a duration in ms .* got NaN/],
    [{ maxRetryAfter: -5 }, /maxRetryAfter must be a duration/],
    [{ budgetPercent: 150 }, /budgetPercent must be a percentage from 0 to 100, got 150/],
    [{ minRetryConcurrency: -1 }, /minRetryConcurrency must be a non-negative integer/],
    [{ statuses: [404] }, /404 will not succeed on a retry; of the 4xx statuses only 429/],
    [{ statuses: [200] }, /statuses must hold 4xx\/5xx status codes, got 200/],
    [{ methods: 'GET' as unknown as string[] }, /methods must be an array of HTTP method names/],
    [{ idempotencyKeyHeader: 'bad header' }, /idempotencyKeyHeader must be an HTTP header name/],
    [{ cooldown: { maxCooldown: 0 } }, /cooldown.maxCooldown must be greater than 0/],
    [{ cooldown: { forever: true } as never }, /cooldown: unknown option "forever"/],
    [{ retry: 3 } as never, /Retrier: unknown option "retry"; expected one of retries, /],
    [
      { partners: { billing: { retries: -2 } } },
      /partners\["billing"\]\.retries must be .* got -2/,
    ],
    [
      { partners: { billing: { limit: 2 } as never } },
      /partners\["billing"\]: unknown option "limit"/,
    ],
    [{ limiter: {} as never }, /limiter must be a HostLimiter, got an object/],
    [{ sleep: 5 as never }, /sleep must be a function, got 5/],
  ];
  it.each(bad)('rejects %o at construction with a TypeError naming it', (options, message) => {
    expect(() => new Retrier(options)).toThrow(TypeError);
    expect(() => new Retrier(options)).toThrow(message);
    expect(() => createRetrier(options)).toThrow(message); // the alias validates the same
  });

  it('createRetrier(options) is an alias of new Retrier(options)', () => {
    const retrier = createRetrier({ retries: 1 });
    expect(retrier).toBeInstanceOf(Retrier);
    expect(retrier.stats()).toEqual(new Retrier({ retries: 1 }).stats());
  });

  it('lets a partner override the retrier-wide policy, inheriting the rest', () => {
    const base = resolvePolicy('', { retries: 4, cooldown: true });
    const billing = resolvePolicy('', { budgetPercent: 50, cooldown: false }, base);
    expect(billing.retries).toBe(4);
    expect(billing.budgetPercent).toBe(50);
    expect(billing.maxCooldown).toBeUndefined();
    expect(base.maxCooldown).toBe(60_000);
  });
});
