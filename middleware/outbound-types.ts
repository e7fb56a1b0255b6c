/**
 * The types of `req.outbound`, apart from `outbound()` so that outbound-context.ts, which
 * implements them, and outbound.ts, which builds the contexts, do not import each other.
 */
import type {
  Dispatcher,
  RequestInfo,
  RequestInit,
  Response,
  request as undiciRequest,
} from 'undici';
import type { PriorityClassOption } from '../src/index.js';

/** `init` for `req.outbound.fetch`: undici's, without `dispatcher` (always the limited one). */
export type OutboundFetchInit = Omit<RequestInit, 'dispatcher'> & PriorityClassOption;

/** `options` for `req.outbound.request`: undici's, without `dispatcher`; `signal` is an AbortSignal. */
export type OutboundRequestOptions = Omit<
  NonNullable<Parameters<typeof undiciRequest>[1]>,
  'dispatcher' | 'signal'
> & { signal?: AbortSignal | null | undefined } & PriorityClassOption;

/** What `outbound()` puts on every request as `req.outbound`. */
export interface Outbound {
  /**
   * Aborts with `ClientDisconnectedError` when the client goes away before the response has
   * finished, with `DeadlineExceededError` when the request's deadline passes, or with
   * `ResponseSentError` once the response has been sent (unless `afterResponse: 'continue'`).
   * Pass it to any other work the request starts (database queries, timers).
   */
  readonly signal: AbortSignal;
  /** This request's whole deadline budget in ms (`outbound({ deadline })`); `undefined`: none. */
  readonly budgetMs: number | undefined;
  /** When the budget runs out, on the `performance.now()` clock; `undefined`: no deadline. */
  readonly deadline: number | undefined;
  /** Budget left in ms (0 once passed); `Infinity` without a deadline. */
  remainingMs(): number;
  /** undici's `fetch` through the limited dispatcher, cancelled when the client leaves. */
  readonly fetch: (input: RequestInfo, init?: OutboundFetchInit) => Promise<Response>;
  /** undici's `request` through the limited dispatcher, cancelled when the client leaves. */
  readonly request: (
    url: string | URL,
    options?: OutboundRequestOptions,
  ) => Promise<Dispatcher.ResponseData>;
  /**
   * `fetch` and `request` for work meant to outlive the response (a cache refresh, an audit
   * write): same partner gates and `perRequest` cap, but not cancelled when the response has
   * been sent, the client leaves or the deadline passes — only by the call's own `signal`.
   */
  readonly background: OutboundBackground;
}

/** `req.outbound.background`: calls that are not cancelled with their request. */
export interface OutboundBackground {
  readonly fetch: Outbound['fetch'];
  readonly request: Outbound['request'];
}

export interface PerRequestOptions {
  /** Outbound calls one inbound request may have in flight at once. */
  limit: number;
  /** Calls of the same request waiting beyond `limit` (default 1000). */
  maxQueue?: number;
  /** How long one call may wait for its request's own permit, in ms (default 30 000). */
  queueTimeout?: number;
}
