import { describe, optionalSignal } from '../common/options.js';
import type { Semaphore } from '../gate/semaphore.js';
import {
  type HostLimiter,
  type HostLimiterOptions,
  limiterFrom,
} from '../partners/host-limiter.js';
import { FetchCall } from './fetch-call.js';
import {
  firstHop,
  type Hop,
  isRedirect,
  markRedirected,
  nextHop,
  redirectMode,
} from './fetch-redirects.js';
import type { CallableFetch, InitLike, ResponseLike } from './fetch-response.js';
import { type PriorityClassOption, priorityFor } from './priority.js';

/**
 * Any WHATWG-style fetch: the global `fetch`, `undici.fetch`, an SDK's `fetch` option. Its
 * `Response.body` must be a WHATWG `ReadableStream` (or `null`).
 */
export type FetchFunction = (input: never, init?: never) => Promise<unknown>;

/**
 * What {@link limitFetch} returns: `fetchFn`'s signature, whose `init` also takes
 * `priorityClass` ({@link PriorityClassOption}), so that
 * `limitFetch(fetch, limiter)(url, { priorityClass: 'batch' })` type-checks without a cast.
 */
export type LimitedFetch<F extends FetchFunction> = F extends (
  input: infer I,
  init?: infer N,
) => infer R
  ? (input: I, init?: N & PriorityClassOption) => R
  : F;

/**
 * Wraps a fetch function so that every call holds one permit of its partner's gate, from
 * before the request is sent until its response body has ended — the semantics of the
 * `limitHosts` interceptor, for any WHATWG fetch (the global `fetch`, `undici.fetch`,
 * or the `fetch` option of an SDK) and without touching its dispatcher.
 *
 * Per call:
 * - The gate comes from the request URL (a string, a `URL` or a `Request`) via
 *   `limiter.gateFor(url)`; no gate (`unknownHosts: 'unlimited'`) calls `fetchFn` untouched.
 * - A permit is taken before `fetchFn` runs: at once when one is free, otherwise by waiting in
 *   the gate's bounded queue. The caller's signal (`init.signal`, else the `Request`'s, as in
 *   fetch) aborts the wait: the call rejects at once with `signal.reason`, leaves the queue, and
 *   never reaches the partner. Aborted later, it aborts the request and, once the response is
 *   here, ends the body (whether or not anyone is reading); the permit returns once the
 *   connection is closed on our side (the teardown policy of every entry point, plus the
 *   partner's `holdAfterAbort`), counted as `aborted`, as is a body the caller cancels.
 * - The permit is released exactly once: when the body has been read to its end, cancelled
 *   (`res.body.cancel()`), or has errored; at once for a response without a body (204, HEAD);
 *   and when `fetchFn` rejects or throws.
 * - `fetchFn` receives a signal of limitFetch's own that follows the caller's. When the permit
 *   outlives the gate's `maxHold` (default 60 s: an unread body), that signal aborts with a
 *   `PermitHoldTimeoutError`, the body stream errors with it, and the gate takes the permit back.
 *
 * Decisions (differences from plain fetch and from the interceptor):
 * - **Errors are ours, unwrapped.** A shed call rejects with the `QueueFullError` /
 *   `QueueTimeoutError` / `TooManyHostsError` itself (and `UnknownHostError` under
 *   `unknownHosts: 'reject'`), not with `TypeError('fetch failed', { cause })` as a fetch
 *   through `limitHosts` does: `instanceof` and `retryAfterMs` work directly, and nothing was
 *   sent. `findShedError(err)` recognises both shapes. A malformed or non-http(s) URL rejects
 *   with a `TypeError`, as fetch does, before any permit is taken.
 * - **Each hop of a redirect chain holds its own permit, of the gate of the URL it goes to**, as
 *   with the interceptor: with `redirect: 'follow'` (the default) limitFetch sends each hop with
 *   `redirect: 'manual'` and follows the `Location` itself (the Fetch standard's steps: at most
 *   20 redirects, 303 and a POST's 301/302 become a GET without body, `Authorization`, `Cookie`
 *   and `Proxy-Authorization` dropped on a change of origin, a stream body cannot be sent
 *   again). A URL that redirects to a partner waits for the partner's permit, whatever origin
 *   the chain started at. The permit of one hop goes back before the next is asked for. The
 *   response's `url` is the last hop's and `redirected` is true. `redirect: 'manual'` and
 *   `'error'` are passed to `fetchFn` as given. A `fetchFn` that answers `'manual'` with an
 *   opaque redirect (a browser's) leaves nothing to follow: that response is returned.
 * - **The response is a new `Response`** around a stream that wraps the original body: status,
 *   statusText and headers are copied (the headers become a mutable copy), and `url`,
 *   `redirected` and `type`, which the `Response` constructor cannot set, are defined as own
 *   properties of it (kept by `clone()`). It is built with the global `Response` when the
 *   original is one (a subclass, like a mock library's, is not kept), else with the
 *   original's own class (undici's `Response` for `undici.fetch`). Its body offers no BYOB reader.
 * - **Read or cancel every body.** An unread body holds its permit until `maxHold`.
 * - **Priority classes**: `init.priorityClass` names the class to wait in at a partner gate with
 *   `priorities` (ignored by a gate without; passed on to `fetchFn` with the rest of `init`).
 *
 * @param fetchFn The fetch to wrap; called with the caller's input and init (a copy with the
 *   signal replaced). Captured once: to wrap a patched global (nock), wrap after patching.
 * @param limiterOrOptions A {@link HostLimiter}, shared with other layers, or its options.
 * @returns A function with `fetchFn`'s signature.
 *
 * @example
 * import { fetch } from 'undici';
 * import { limitFetch, findShedError } from 'hostgate';
 *
 * const limited = limitFetch(fetch, {
 *   partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 20, maxQueue: 200 }],
 * });
 * async function invoices(signal: AbortSignal) {
 *   try {
 *     const res = await limited('https://api.billing.example/invoices', { signal });
 *     return await res.json(); // the permit returns when the body has been read
 *   } catch (err) {
 *     const shed = findShedError(err); // QueueFullError | QueueTimeoutError | TooManyHostsError
 *     if (shed) return retryLater(shed.retryAfterMs);
 *     throw err;
 *   }
 * }
 */
export function limitFetch<F extends FetchFunction>(
  fetchFn: F,
  limiterOrOptions: HostLimiter | HostLimiterOptions,
): LimitedFetch<F> {
  if (typeof fetchFn !== 'function') {
    throw new TypeError(
      `limitFetch: fetchFn must be a fetch function (fetch, undici.fetch, ...), got ${describe(fetchFn)}`,
    );
  }
  const limiter = limiterFrom('limitFetch', limiterOrOptions);
  const inner = fetchFn as unknown as CallableFetch;

  /** One request under the gate of its URL (none: `fetchFn` untouched). */
  async function send(
    input: unknown,
    init: InitLike | undefined,
    target: string | URL,
    signal: AbortSignal | undefined,
  ): Promise<ResponseLike> {
    // Everything up to the first await runs in the caller's tick: gateFor and the acquire must
    // share one tick (an idle per-origin gate may be evicted in between otherwise).
    const gate: Semaphore | undefined = limiter.gateFor(target);
    if (gate === undefined) return inner(input, init);
    if (signal?.aborted) throw signal.reason;
    const call = new FetchCall(signal, requestOf(input, init, target));
    const waiting = call.acquire(gate, priorityFor(gate, init?.priorityClass));
    if (waiting !== undefined) await waiting;
    return call.run(inner, input, init, limiter) as Promise<ResponseLike>;
  }

  async function limitedFetch(input: unknown, init?: InitLike): Promise<unknown> {
    const signal = callerSignal(input, init);
    const target = targetOf(input);
    if (redirectMode(input, init) !== 'follow') return send(input, init, target, signal);
    let response = await send(input, { ...init, redirect: 'manual' }, target, signal);
    if (!isRedirect(response.status)) return response; // most calls: nothing more to do
    let hop: Hop = firstHop(input, init, new URL(target)); // gateFor has parsed it already
    for (let redirects = 0; ; redirects++) {
      let next: Hop | undefined;
      try {
        next = nextHop(response, hop, redirects);
      } catch (error) {
        await response.body?.cancel(error);
        throw error;
      }
      if (next === undefined)
        return redirects === 0 ? response : markRedirected(response, hop.url.href);
      // The permit of this hop goes back (once its body is cancelled) before the next is asked.
      await response.body?.cancel();
      hop = next;
      const href = hop.url.href;
      response = await send(
        href,
        signal === undefined ? hop.init : { ...hop.init, signal },
        href,
        signal,
      );
    }
  }
  return limitedFetch as unknown as LimitedFetch<F>;
}

/** The URL a fetch input names: a string, a URL, a Request's `url`, or anything stringified. */
function targetOf(input: unknown): string | URL {
  if (typeof input === 'string' || input instanceof URL) return input;
  if (typeof input === 'object' && input !== null) {
    const url = (input as { url?: unknown }).url;
    if (typeof url === 'string') return url; // a Request (of any realm or copy of undici)
  }
  return String(input); // fetch stringifies other inputs too
}

/** The caller's signal: `init.signal` when present (`null` meaning none), else the Request's. */
function callerSignal(input: unknown, init: InitLike | undefined): AbortSignal | undefined {
  if (init != null && init.signal !== undefined) return optionalSignal('init.signal', init.signal);
  if (typeof input === 'object' && input !== null && !(input instanceof URL)) {
    const signal = (input as { signal?: unknown }).signal;
    if (signal instanceof AbortSignal) return signal;
  }
  return undefined;
}

/** What the permit records: method and URL (the permit keeps its origin and path, no query). */
function requestOf(input: unknown, init: InitLike | undefined, target: string | URL) {
  const method = init?.method ?? (input as { method?: unknown } | null)?.method;
  return { method: typeof method === 'string' ? method : undefined, origin: target };
}
