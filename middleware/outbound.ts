import { setMaxListeners } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type {} from 'express-serve-static-core';
import {
  Agent,
  type Dispatcher,
  type RequestInfo,
  type RequestInit,
  type Response,
  fetch as undiciFetch,
  request as undiciRequest,
} from 'undici';
import {
  ClientDisconnectedError,
  HostLimiter,
  type HostLimiterOptions,
  limitGate,
  limitHosts,
  Semaphore,
} from '../src/index.js';
import { checkKnownKeys, checkObject, describe } from '../src/options.js';

/**
 * Default per-request queue bound: 1,000 calls. A single inbound request that fans out wider
 * than that is a runaway loop, not a workload; the bound keeps it from growing without limit.
 */
export const DEFAULT_PER_REQUEST_MAX_QUEUE = 1000;
/**
 * Default per-request wait deadline: 30 s. Waiting for one's own sibling calls is not overload,
 * so this is no load-shedding deadline; it only breaks a self-inflicted stall (a sibling whose
 * response body is never read keeps its permit until the partner's maxHold, 60 s by default).
 */
export const DEFAULT_PER_REQUEST_QUEUE_TIMEOUT_MS = 30_000;

/**
 * Listener bound of a request's signal: one listener per outbound call of that request, so
 * a warning past 10,000 would mean a runaway loop, not a fan-out.
 */
const SIGNAL_MAX_LISTENERS = 10_000;

/** `init` for `req.outbound.fetch`: undici's, without `dispatcher` (always the limited one). */
export type OutboundFetchInit = Omit<RequestInit, 'dispatcher'>;

/** `options` for `req.outbound.request`: undici's, without `dispatcher`; `signal` is an AbortSignal. */
export type OutboundRequestOptions = Omit<
  NonNullable<Parameters<typeof undiciRequest>[1]>,
  'dispatcher' | 'signal'
> & { signal?: AbortSignal | null | undefined };

/** What `outbound()` puts on every request as `req.outbound`. */
export interface Outbound {
  /**
   * Aborts with `ClientDisconnectedError` when the client goes away before the response has
   * finished. Pass it to any other work the request starts (database queries, timers).
   */
  readonly signal: AbortSignal;
  /** undici's `fetch` through the limited dispatcher, cancelled when the client leaves. */
  readonly fetch: (input: RequestInfo, init?: OutboundFetchInit) => Promise<Response>;
  /** undici's `request` through the limited dispatcher, cancelled when the client leaves. */
  readonly request: (
    url: string | URL,
    options?: OutboundRequestOptions,
  ) => Promise<Dispatcher.ResponseData>;
}

declare module 'express-serve-static-core' {
  interface Request {
    /** Set by `outbound()` from `hostgate/express`. */
    outbound: Outbound;
  }
}

export interface PerRequestOptions {
  /** Outbound calls one inbound request may have in flight at once. */
  limit: number;
  /** Calls of the same request waiting beyond `limit` (default 1000). */
  maxQueue?: number;
  /** How long one call may wait for its request's own permit, in ms (default 30 000). */
  queueTimeout?: number;
}

export interface OutboundOptions {
  /** The partner gates: a `HostLimiter`, or its options. Mutually exclusive with `dispatcher`. */
  limiter?: HostLimiter | HostLimiterOptions;
  /**
   * Your own dispatcher, already composed with `limitHosts(...)` (and retry/redirect around
   * it). Used as is; `close()` leaves it open.
   */
  dispatcher?: Dispatcher;
  /**
   * Cap on one inbound request's concurrent outbound calls (its fan-out), so a single request
   * cannot take a whole partner gate. A number is the `limit`.
   */
  perRequest?: number | PerRequestOptions;
}

export interface OutboundMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  /** The dispatcher every `req.outbound` call goes through. */
  readonly dispatcher: Dispatcher;
  /** The limiter, when `outbound()` was given one (its `stats()` show every partner gate). */
  readonly limiter: HostLimiter | undefined;
  /** Closes the Agent `outbound()` created; a dispatcher you passed in stays open. */
  close(): Promise<void>;
}

const OUTBOUND_KEYS = ['limiter', 'dispatcher', 'perRequest'] as const;
const PER_REQUEST_KEYS = ['limit', 'maxQueue', 'queueTimeout'] as const;

/**
 * Express middleware: gives every request `req.outbound` — a disconnect-aware `signal`, and
 * `fetch`/`request` bound to the limited dispatcher and to that signal. When the client goes
 * away, every outbound call of its request is cancelled, queued or in flight: its permits come
 * back and the partner sees the request closed.
 *
 * @example
 * app.use(outbound({ limiter, perRequest: 4 }));
 * app.get('/report', async (req, res) => {
 *   const r = await req.outbound.fetch('https://api.billing.example/invoices');
 *   res.json(await r.json());
 * });
 */
export function outbound(options: OutboundOptions): OutboundMiddleware {
  checkObject('outbound options', options);
  checkKnownKeys('outbound', options, OUTBOUND_KEYS);
  let dispatcher: Dispatcher;
  let limiter: HostLimiter | undefined;
  let owned: Agent | undefined;
  if (options.limiter !== undefined && options.dispatcher !== undefined) {
    throw new TypeError(
      'outbound: pass either limiter or dispatcher, not both (compose limitHosts into your dispatcher)',
    );
  }
  if (options.dispatcher !== undefined) {
    const given = options.dispatcher as unknown;
    if (
      given === null ||
      typeof given !== 'object' ||
      typeof (given as Dispatcher).dispatch !== 'function'
    ) {
      throw new TypeError(
        `outbound: dispatcher must be an undici Dispatcher, got ${describe(given)}`,
      );
    }
    dispatcher = options.dispatcher;
  } else if (options.limiter !== undefined) {
    limiter =
      options.limiter instanceof HostLimiter ? options.limiter : new HostLimiter(options.limiter);
    owned = new Agent();
    dispatcher = owned.compose(limitHosts(limiter));
  } else {
    throw new TypeError('outbound needs { limiter } (partner gates) or { dispatcher }');
  }
  const perRequest = parsePerRequest(options.perRequest);
  const shared: Shared = { dispatcher, perRequest };

  const middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => {
    const context = new OutboundContext(shared, res);
    (req as IncomingMessage & { outbound: Outbound }).outbound = context;
    if (res.destroyed && !res.writableFinished) context.disconnect();
    // `once`: removed when it fires, and a ServerResponse always emits 'close' (after 'finish'
    // on a normal end), so nothing is left on a keep-alive socket or on the response.
    else res.once('close', context.onClose);
    next();
  };
  return Object.assign(middleware, {
    dispatcher,
    limiter,
    close: async () => {
      await owned?.close();
    },
  });
}

interface Shared {
  dispatcher: Dispatcher;
  perRequest: Required<PerRequestOptions> | undefined;
}

/** One inbound request's outbound client. Everything in it is released with the request. */
class OutboundContext implements Outbound {
  readonly #shared: Shared;
  readonly #res: ServerResponse;
  #controller: AbortController | undefined = undefined;
  #disconnected: ClientDisconnectedError | undefined = undefined;
  #dispatcher: Dispatcher | undefined = undefined;

  constructor(shared: Shared, res: ServerResponse) {
    this.#shared = shared;
    this.#res = res;
  }

  get signal(): AbortSignal {
    let controller = this.#controller;
    if (controller === undefined) {
      controller = new AbortController();
      // This signal lives and dies with one inbound request, so listeners cannot pile up
      // across requests; but a fan-out of more than 10 calls is legitimate (`request` holds a
      // listener until it completes, `fetch` until its Request is garbage-collected) and must
      // not print MaxListenersExceededWarning. Not 0 (= unlimited): Node 20's
      // getMaxListeners() throws for an EventTarget set to 0, and undici's fetch calls it.
      setMaxListeners(SIGNAL_MAX_LISTENERS, controller.signal);
      if (this.#disconnected !== undefined) controller.abort(this.#disconnected);
      this.#controller = controller;
    }
    return controller.signal;
  }

  readonly onClose = (): void => {
    if (!this.#res.writableFinished) this.disconnect();
  };

  disconnect(): void {
    if (this.#disconnected !== undefined) return;
    this.#disconnected = new ClientDisconnectedError();
    this.#controller?.abort(this.#disconnected);
  }

  readonly fetch = (input: RequestInfo, init?: OutboundFetchInit): Promise<Response> => {
    // `init.signal` replaces a Request's own signal in fetch; keep the caller's either way.
    const own =
      init?.signal ??
      (typeof input === 'object' && 'signal' in input ? (input.signal as AbortSignal) : undefined);
    return undiciFetch(input, {
      ...init,
      dispatcher: this.#dispatcherFor(),
      signal: this.#combine(own),
    });
  };

  readonly request = (
    url: string | URL,
    options?: OutboundRequestOptions,
  ): Promise<Dispatcher.ResponseData> =>
    undiciRequest(url, {
      ...options,
      dispatcher: this.#dispatcherFor(),
      signal: this.#combine(options?.signal ?? undefined),
    }) as Promise<Dispatcher.ResponseData>;

  #combine(own: AbortSignal | null | undefined): AbortSignal {
    const signal = this.signal;
    return own == null ? signal : AbortSignal.any([signal, own]);
  }

  #dispatcherFor(): Dispatcher {
    let dispatcher = this.#dispatcher;
    if (dispatcher === undefined) {
      const { perRequest } = this.#shared;
      dispatcher =
        perRequest === undefined
          ? this.#shared.dispatcher
          : // Outermost, so a call takes its request's permit first and its partner's second.
            // Partner permits are never held while waiting for a per-request permit, so the
            // two gates cannot wait on each other (fixed order: no deadlock).
            this.#shared.dispatcher.compose(
              limitGate(new Semaphore({ ...perRequest, name: 'perRequest' })),
            );
      this.#dispatcher = dispatcher;
    }
    return dispatcher;
  }
}

function parsePerRequest(
  value: OutboundOptions['perRequest'],
): Required<PerRequestOptions> | undefined {
  if (value === undefined) return undefined;
  const options = typeof value === 'number' ? { limit: value } : value;
  checkObject('outbound perRequest', options);
  checkKnownKeys('outbound perRequest', options, PER_REQUEST_KEYS);
  const resolved = {
    limit: options.limit,
    maxQueue: options.maxQueue ?? DEFAULT_PER_REQUEST_MAX_QUEUE,
    queueTimeout: options.queueTimeout ?? DEFAULT_PER_REQUEST_QUEUE_TIMEOUT_MS,
  };
  try {
    new Semaphore(resolved); // validate at construction, not on the first request
  } catch (error) {
    throw new TypeError(`outbound perRequest: ${(error as Error).message}`);
  }
  return resolved;
}
