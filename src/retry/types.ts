/** The public shapes of the retry layer: what it wraps, what it reports, what it is told. */

import type { Semaphore } from '../gate/semaphore.js';
import type { HostLimiter } from '../partners/host-limiter.js';
import type { RetryPolicyOptions } from './policy.js';

/** The part of a `Response` the retrier reads: global fetch's and undici's both fit. */
export interface ResponseLike {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  readonly body: { cancel(reason?: unknown): Promise<void> } | null;
  readonly bodyUsed: boolean;
}

/** Any fetch-shaped function: global `fetch`, `undici.fetch`, `limitFetch(...)`. */
// biome-ignore lint/suspicious/noExplicitAny: parameters of any fetch flavour must be accepted
export type FetchLike = (input: any, init?: any) => Promise<ResponseLike>;

/** Passed to `onRetry` after the failed attempt's body was cancelled, just before the backoff. */
export interface RetryEvent {
  /** Partner (gate) name, or the origin when no limiter gate applies. */
  partner: string;
  url: string;
  method: string;
  /** The attempt that failed: 1 for the first. */
  attempt: number;
  /** The backoff about to start, in ms. */
  delayMs: number;
  /** The failed attempt's status, when the partner answered. */
  status: number | undefined;
  /** The failed attempt's error, when it got no answer. */
  error: unknown;
  /** The partner's `Retry-After`, in ms, when it sent one. */
  retryAfterMs: number | undefined;
  /** The partner's gate. No permit of this call is held any more: each attempt takes its own. */
  gate: Semaphore | undefined;
}

export interface RetrierOptions extends RetryPolicyOptions {
  /**
   * The limiter the wrapped fetch takes its permits from. Budgets, cooldowns and counters are
   * kept per gate (`limiter.gateFor(url)`); without one, per origin, with only the budget floor.
   */
  limiter?: HostLimiter | undefined;
  /** Per partner (gate name) overrides of the policy, e.g. `{ billing: { cooldown: true } }`. */
  partners?: Record<string, RetryPolicyOptions>;
  /** Called before each backoff sleep (logging, tests). A throw ends the call with that error. */
  onRetry?: (event: RetryEvent) => void;
  /**
   * A clock in epoch ms, to read an HTTP-date `Retry-After` (default `Date.now`). Given, it also
   * times cooldowns and `maxRetryTime` (a fake clock in tests); by default those run on the
   * monotonic `performance.now()`, so a wall-clock step neither stretches nor cuts them.
   */
  now?: () => number;
  /** The backoff sleep (default: a timer that ends at once, rejecting, when `signal` aborts). */
  sleep?: (ms: number, signal: AbortSignal | undefined) => Promise<void>;
  /** Uniform random in [0, 1) for the jitter (default `Math.random`). */
  random?: () => number;
}

/** One call for `Retrier.run`: what the attempts send, so the retrier can judge them. */
export interface RetryRequest {
  url: string | URL;
  /** Default GET. */
  method?: string;
  /** Checked for the idempotency key header. */
  headers?: Headers | Record<string, string> | [string, string][];
  /** The caller's signal: no retry after it aborts, and a backoff ends at once when it does. */
  signal?: AbortSignal | undefined;
}
