import { publishRequestError, publishResponse } from './diagnostics.js';
import type { PermitHoldTimeoutError } from './errors.js';
import { HostLimiter, type HostLimiterOptions } from './host-limiter.js';
import { describe, optionalSignal } from './options.js';
import type { Permit, Semaphore } from './semaphore.js';

/**
 * Any WHATWG-style fetch: the global `fetch`, `undici.fetch`, an SDK's `fetch` option. Its
 * `Response.body` must be a WHATWG `ReadableStream` (or `null`).
 */
export type FetchFunction = (input: never, init?: never) => Promise<unknown>;

/** What limitFetch relies on in a response; both Node's and undici's `Response` fit. */
interface ResponseLike {
  readonly body: ReadableStream<Uint8Array> | null;
  readonly status: number;
  readonly statusText: string;
  readonly headers: unknown;
  readonly url: string;
  readonly redirected: boolean;
  readonly type: string;
  clone(): ResponseLike;
}

type ResponseConstructor = new (
  body: ReadableStream<Uint8Array>,
  init: { status: number; statusText: string; headers: unknown },
) => ResponseLike;

type InitLike = { signal?: AbortSignal | null } & Record<string, unknown>;
type CallableFetch = (input: unknown, init?: InitLike) => Promise<ResponseLike>;

/** Statuses whose responses cannot carry a body (`new Response(body, { status })` throws). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

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
 *   connection is down (`afterTeardown`: a few event-loop turns), so the next waiter cannot
 *   reach the partner before it has seen this request close.
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
 * - **A redirect chain holds one permit.** fetch follows redirects inside one call, so every hop
 *   is covered by the same permit (the interceptor gives each hop its own). Partners usually
 *   redirect to themselves; to gate each hop, pass `redirect: 'manual'` and follow yourself.
 * - **The response is a new `Response`** around a stream that wraps the original body: status,
 *   statusText and headers are copied (the headers become a mutable copy), and `url`,
 *   `redirected` and `type`, which the `Response` constructor cannot set, are defined as own
 *   properties of it (kept by `clone()`). It is built with the global `Response` when the
 *   original is one (a subclass, like a mock library's, is not kept), else with the
 *   original's own class (undici's `Response` for `undici.fetch`). Its body offers no BYOB reader.
 * - **Read or cancel every body.** An unread body holds its permit until `maxHold`.
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
): F {
  if (typeof fetchFn !== 'function') {
    throw new TypeError(
      `limitFetch: fetchFn must be a fetch function (fetch, undici.fetch, ...), got ${describe(fetchFn)}`,
    );
  }
  const limiter =
    limiterOrOptions instanceof HostLimiter ? limiterOrOptions : new HostLimiter(limiterOrOptions);
  const inner = fetchFn as unknown as CallableFetch;

  async function limitedFetch(input: unknown, init?: InitLike): Promise<unknown> {
    // Everything up to the first await runs in the caller's tick: gateFor and the acquire must
    // share one tick (an idle per-origin gate may be evicted in between otherwise).
    const signal = callerSignal(input, init);
    const target = targetOf(input);
    const gate: Semaphore | undefined = limiter.gateFor(target);
    if (gate === undefined) return inner(input, init);
    if (signal?.aborted) throw signal.reason;
    const permit = gate.tryAcquire() ?? (await gate.acquire({ signal }));
    permit.request = { method: methodOf(input, init), origin: target }; // for leak reports
    return new LimitedCall(permit, signal).run(inner, input, init);
  }
  return limitedFetch as unknown as F;
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

/** The method a fetch call uses: `init.method`, else the Request's; `undefined` means GET. */
function methodOf(input: unknown, init: InitLike | undefined): string | undefined {
  const method = init?.method ?? (input as { method?: unknown } | null)?.method;
  return typeof method === 'string' ? method : undefined;
}

function ignore(): void {}

/**
 * One permit's life in one fetch call. Every exit path funnels into `#finish`, which runs once;
 * aborts (the caller's, or `maxHold`'s) go through `#abort`.
 */
class LimitedCall {
  readonly #permit: Permit;
  readonly #caller: AbortSignal | undefined;
  /** The signal `fetchFn` gets: follows the caller's, and fires on `maxHold`. */
  readonly #own = new AbortController();
  /** The original body, once the response has arrived. */
  #reader: ReadableStreamDefaultReader<Uint8Array> | undefined = undefined;
  /** The body the caller reads. */
  #body: ReadableStreamDefaultController<Uint8Array> | undefined = undefined;
  #done = false;

  constructor(permit: Permit, caller: AbortSignal | undefined) {
    this.#permit = permit;
    this.#caller = caller;
    if (permit.gate.maxHold !== undefined) permit.onHoldTimeout = this.#onHoldTimeout;
    // A listener we remove on finish, rather than AbortSignal.any: a long-lived caller signal
    // (a server's shutdown signal) must not collect one dependent signal per call.
    caller?.addEventListener('abort', this, { once: true });
  }

  async run(fetchFn: CallableFetch, input: unknown, init: InitLike | undefined): Promise<unknown> {
    let response: ResponseLike;
    try {
      // The caller may have aborted between the grant and now: then nothing is sent.
      if (this.#caller?.aborted) throw this.#caller.reason;
      response = await fetchFn(input, { ...init, signal: this.#own.signal });
    } catch (error) {
      publishRequestError(this.#permit, error); // adaptive limits: a timeout is a drop
      this.#finish();
      throw error;
    }
    this.#permit.noteProgress(); // the partner answered
    publishResponse(this.#permit, response.status, response.headers); // adaptive: RTT, status
    try {
      return this.#take(response);
    } catch (error) {
      this.#finish();
      this.#reader?.cancel(error).catch(ignore);
      throw error;
    }
  }

  /** Caller's abort (EventListener object: no closure per call). */
  handleEvent(): void {
    this.#abort(this.#caller?.reason);
  }

  readonly #onHoldTimeout = (error: PermitHoldTimeoutError): void => {
    this.#abort(error);
  };

  /**
   * Aborts the request. While `fetchFn` is pending its rejection finishes the call (after
   * `maxHold` the gate has taken the permit back already); once the response is here, the body
   * is ended from this side too, since nobody may be reading it to notice.
   */
  #abort(reason: unknown): void {
    this.#own.abort(reason);
    const reader = this.#reader;
    if (reader === undefined || this.#done) return;
    this.#finish();
    try {
      this.#body?.error(reason);
    } catch {
      // already closed or errored
    }
    reader.cancel(reason).catch(ignore);
  }

  #take(response: ResponseLike): unknown {
    if (this.#own.signal.aborted) {
      // A fetchFn that resolved in spite of the abort: its response is not the caller's.
      (response.body as ReadableStream | null | undefined)?.cancel?.().catch(ignore);
      throw this.#own.signal.reason;
    }
    const body = response.body;
    if (body == null || NULL_BODY_STATUSES.has(response.status)) {
      this.#finish();
      return response;
    }
    if (typeof body.getReader !== 'function') {
      throw new TypeError(
        'limitFetch: fetchFn returned a Response whose body is not a WHATWG ReadableStream',
      );
    }
    this.#reader = body.getReader();
    const wrapped = new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          this.#body = controller;
        },
        pull: () => this.#pull(),
        cancel: (reason) => this.#cancel(reason),
      },
      { highWaterMark: 0 },
    );
    return rebuild(response, wrapped);
  }

  async #pull(): Promise<void> {
    const reader = this.#reader!;
    const body = this.#body!;
    let chunk: Awaited<ReturnType<typeof reader.read>>;
    try {
      chunk = await reader.read();
    } catch (error) {
      if (this.#done) return;
      this.#finish();
      body.error(error);
      return;
    }
    if (this.#done) return; // aborted (maxHold, caller) while this read was pending
    if (chunk.done) {
      this.#finish(); // before close(): once the caller sees the end, the permit is back
      body.close();
    } else {
      this.#permit.noteProgress();
      body.enqueue(chunk.value);
    }
  }

  #cancel(reason: unknown): Promise<void> {
    const cancelled = this.#reader!.cancel(reason);
    this.#finish();
    return cancelled;
  }

  #finish(): void {
    if (this.#done) return;
    this.#done = true;
    this.#caller?.removeEventListener('abort', this);
    const permit = this.#permit;
    permit.onHoldTimeout = undefined;
    // After a maxHold take-back: a no-op, not a double release. Aborted means by the caller,
    // and then the permit waits until the connection is down (see afterTeardown).
    if (this.#own.signal.aborted) afterTeardown(() => permit.release('aborted'));
    else permit.release('released');
  }
}

/** A Response like `response` whose body is `body`; see limitFetch's notes. */
function rebuild(response: ResponseLike, body: ReadableStream<Uint8Array>): ResponseLike {
  const Ctor = (
    response instanceof Response || typeof response.constructor !== 'function'
      ? Response
      : response.constructor
  ) as ResponseConstructor;
  const wrapped = new Ctor(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  keepIdentity(wrapped, response.url, response.redirected, response.type);
  return wrapped;
}

/** `url`, `redirected` and `type` cannot be passed to the constructor: own properties instead. */
function keepIdentity(target: ResponseLike, url: string, redirected: boolean, type: string): void {
  const clone = Object.getPrototypeOf(target).clone as (this: ResponseLike) => ResponseLike;
  Object.defineProperties(target, {
    url: { value: url, configurable: true },
    redirected: { value: redirected, configurable: true },
    type: { value: type, configurable: true },
    clone: {
      value: function cloneKeepingIdentity(this: ResponseLike): ResponseLike {
        const copy = clone.call(this);
        keepIdentity(copy, url, redirected, type);
        return copy;
      },
      configurable: true,
      writable: true,
    },
  });
}

/** Three event-loop turns: until limitFetch follows the dispatcher's teardown policy. */
function afterTeardown(fn: () => void): void {
  setImmediate(() => setImmediate(() => setImmediate(fn)));
}
