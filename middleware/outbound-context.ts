import { setMaxListeners } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { Dispatcher, RequestInfo, Response } from 'undici';
import { loadUndici } from '../src/http/undici.js';
import {
  ClientDisconnectedError,
  DeadlineExceededError,
  expectedWaitMs,
  type HostLimiter,
  limitGate,
  ResponseSentError,
  Semaphore,
  shedForDeadline,
  withPriority,
} from '../src/index.js';
import { fetchHeaders, type Propagation, requestHeaders } from './deadline.js';
import type {
  Outbound,
  OutboundBackground,
  OutboundFetchInit,
  OutboundRequestOptions,
  PerRequestOptions,
} from './outbound-types.js';

/**
 * Listener bound of a request's signal: one listener per outbound call of that request, so
 * a warning past 10,000 would mean a runaway loop, not a fan-out.
 */
const SIGNAL_MAX_LISTENERS = 10_000;

/** What every request's context shares: built once by `outbound()`. */
export interface Shared {
  dispatcher: Dispatcher;
  perRequest: Required<PerRequestOptions> | undefined;
  /** Set when `outbound()` knows the partner gates: the early deadline shed needs them. */
  limiter: HostLimiter | undefined;
  shedEarly: boolean;
  /** Header that carries the budget left to partners, if any. */
  propagate: Propagation | undefined;
  /** `'abort'`: calls still running when the response has been sent are cancelled. */
  afterResponse: 'abort' | 'continue';
}

/** One inbound request's outbound client. Everything in it is released with the request. */
export class OutboundContext implements Outbound {
  readonly #shared: Shared;
  readonly #res: ServerResponse;
  readonly budgetMs: number | undefined;
  readonly deadline: number | undefined;
  #controller: AbortController | undefined = undefined;
  #disconnected: ClientDisconnectedError | undefined = undefined;
  #expired: DeadlineExceededError | undefined = undefined;
  #sent: ResponseSentError | undefined = undefined;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  #closed = false;
  #dispatcher: Dispatcher | undefined = undefined;
  #perRequestGate: Semaphore | undefined = undefined;
  /** Listeners this request put on callers' own signals, removed when it closes at the latest. */
  #detach: (() => void)[] | undefined = undefined;

  /** The request's priority class (`outbound({ priority })`); a call's own wins. */
  readonly #priorityClass: string | undefined;
  /** Dispatchers that tag calls with a class other than the request's, by class. */
  #byClass: Map<string, Dispatcher> | undefined = undefined;

  constructor(
    shared: Shared,
    res: ServerResponse,
    budgetMs: number | undefined,
    priorityClass: string | undefined,
  ) {
    this.#priorityClass = priorityClass;
    this.#shared = shared;
    this.#res = res;
    this.budgetMs = budgetMs;
    this.deadline = budgetMs === undefined ? undefined : performance.now() + budgetMs;
  }

  remainingMs(): number {
    const deadline = this.deadline;
    return deadline === undefined
      ? Number.POSITIVE_INFINITY
      : Math.max(0, deadline - performance.now());
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
      this.#controller = controller;
      const reason = this.#disconnected ?? this.#expired ?? this.#sent;
      if (reason !== undefined) controller.abort(reason);
      else if (this.deadline !== undefined && !this.#closed) this.#armDeadline();
    }
    return controller.signal;
  }

  /** Disconnect and deadline share one signal, so a call needs no `AbortSignal.any` for them. */
  #armDeadline(): void {
    const remaining = this.deadline! - performance.now();
    if (remaining <= 0) {
      this.#expire();
      return;
    }
    // Unref'd: it only bounds work that keeps the process alive by itself.
    this.#timer = setTimeout(this.#expire, Math.ceil(remaining));
    this.#timer.unref?.();
  }

  readonly #expire = (): void => {
    this.#timer = undefined;
    if (this.#disconnected !== undefined || this.#expired !== undefined) return;
    this.#expired = new DeadlineExceededError(this.budgetMs!);
    this.#controller?.abort(this.#expired);
  };

  readonly onClose = (): void => {
    this.#closed = true;
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    if (!this.#res.writableFinished) this.disconnect();
    else if (this.#shared.afterResponse === 'abort') this.#responseSent();
    const detach = this.#detach;
    this.#detach = undefined;
    if (detach !== undefined) for (const fn of detach) fn();
  };

  /**
   * The response has been sent: calls still running (siblings of a call that was shed and
   * answered 503, say) would be read by nobody. They are cancelled, their permits come back and
   * the partner sees them closed; `background` calls are not.
   */
  #responseSent(): void {
    if (this.#disconnected !== undefined || this.#expired !== undefined) return;
    this.#sent = new ResponseSentError();
    this.#controller?.abort(this.#sent);
  }

  disconnect(): void {
    if (this.#disconnected !== undefined) return;
    this.#disconnected = new ClientDisconnectedError();
    if (this.#expired === undefined) this.#controller?.abort(this.#disconnected);
  }

  readonly fetch = (input: RequestInfo, init?: OutboundFetchInit): Promise<Response> =>
    this.#fetch(input, init, false);

  readonly request = (
    url: string | URL,
    options?: OutboundRequestOptions,
  ): Promise<Dispatcher.ResponseData> => this.#request(url, options, false);

  #background: OutboundBackground | undefined = undefined;

  /**
   * `fetch` and `request` for work meant to outlive the response (a cache warm-up, an audit
   * write): the same partner gates and per-request cap, but cancelled by neither the response
   * ending, the client leaving nor the deadline — only by the call's own `signal`.
   */
  get background(): OutboundBackground {
    this.#background ??= {
      fetch: (input, init) => this.#fetch(input, init, true),
      request: (url, options) => this.#request(url, options, true),
    };
    return this.#background;
  }

  #fetch(input: RequestInfo, init: OutboundFetchInit | undefined, detached: boolean) {
    const refused = detached ? undefined : this.#admit(input);
    if (refused !== undefined) return Promise.reject(refused);
    // `init.signal` replaces a Request's own signal in fetch; keep the caller's either way.
    const own =
      init?.signal ??
      (typeof input === 'object' && 'signal' in input ? (input.signal as AbortSignal) : undefined);
    const combined: { signal: AbortSignal | undefined; detach?: () => void } = detached
      ? { signal: own ?? undefined }
      : this.#combine(own);
    const call = loadUndici().fetch(input, {
      ...init,
      ...fetchHeaders(detached ? undefined : this.#budgetHeader(), init, input),
      dispatcher: this.#dispatcherFor(init?.priorityClass),
      signal: combined.signal,
    });
    // A body still streaming needs the caller's abort: kept until the request closes.
    if (combined.detach !== undefined) call.catch(combined.detach);
    return call;
  }

  #request(
    url: string | URL,
    options: OutboundRequestOptions | undefined,
    detached: boolean,
  ): Promise<Dispatcher.ResponseData> {
    const refused = detached ? undefined : this.#admit(url);
    if (refused !== undefined) return Promise.reject(refused);
    const combined: { signal: AbortSignal | undefined; detach?: () => void } = detached
      ? { signal: options?.signal ?? undefined }
      : this.#combine(options?.signal ?? undefined);
    const call = loadUndici().request(url, {
      ...options,
      ...requestHeaders(detached ? undefined : this.#budgetHeader(), options?.headers),
      dispatcher: this.#dispatcherFor(options?.priorityClass),
      signal: combined.signal,
    }) as Promise<Dispatcher.ResponseData>;
    const { detach } = combined;
    if (detach !== undefined) {
      call.then((data) => data.body.once('close', detach), detach);
    }
    return call;
  }

  /**
   * The deadline's say on a call about to start: a `DeadlineShedError` when it cannot finish
   * in the budget left (nothing queued, no permit taken), else `undefined`. Past the deadline
   * (even if its timer has not run yet) the signal's reason: undici would still dispatch a call
   * whose signal is already aborted.
   */
  #admit(target: RequestInfo | string | URL): unknown {
    const deadline = this.deadline;
    if (deadline === undefined) return undefined;
    const remaining = deadline - performance.now();
    if (remaining <= 0) {
      const signal = this.signal;
      if (!signal.aborted) this.#expire();
      return signal.reason;
    }
    const { limiter, shedEarly } = this.#shared;
    if (!shedEarly || limiter === undefined) return undefined;
    let gate: Semaphore | undefined;
    try {
      gate = limiter.gateFor(
        typeof target === 'string' || target instanceof URL ? target : target.url,
      );
    } catch {
      return undefined; // the interceptor raises the same error, as it would without a deadline
    }
    if (gate === undefined) return undefined;
    this.#baseDispatcher();
    const own = this.#perRequestGate;
    const ownWait = own === undefined ? 0 : expectedWaitMs(own, gate.holdTimes.quantile(0.5));
    return shedForDeadline(gate, remaining, ownWait);
  }

  /** `[name, value]` of the budget-left header when `deadline.propagate` asks for one. */
  #budgetHeader(): [string, string] | undefined {
    const propagate = this.#shared.propagate;
    if (propagate === undefined || this.deadline === undefined) return undefined;
    return [propagate.name, propagate.format(this.deadline - performance.now())];
  }

  /**
   * The request's signal combined with a caller's own. Not `AbortSignal.any`: on Node 20 every
   * call would leave an entry on `own` that is never removed until `own` aborts, a leak when
   * `own` is long-lived (a shutdown signal). Here the listener on `own` is removed when the
   * call settles (`request`: its body closed; `fetch`: a failure) or the request closes.
   */
  #combine(own: AbortSignal | null | undefined): { signal: AbortSignal; detach?: () => void } {
    const signal = this.signal;
    if (own == null || own === signal || signal.aborted) return { signal };
    if (own.aborted) return { signal: own };
    // After the response closed nothing would detach a call's listener; rare enough for `any`.
    if (this.#closed) return { signal: AbortSignal.any([signal, own]) };
    const controller = new AbortController();
    setMaxListeners(SIGNAL_MAX_LISTENERS, controller.signal);
    const fromOwn = () => controller.abort(own.reason);
    const fromRequest = () => controller.abort(signal.reason);
    own.addEventListener('abort', fromOwn, { once: true });
    signal.addEventListener('abort', fromRequest, { once: true });
    let attached = true;
    const detach = () => {
      if (!attached) return;
      attached = false;
      own.removeEventListener('abort', fromOwn);
      signal.removeEventListener('abort', fromRequest);
    };
    const list = this.#detach ?? [];
    list.push(detach);
    this.#detach = list;
    return { signal: controller.signal, detach };
  }

  /**
   * The dispatcher for a call in class `own` (else the request's class). fetch hands a
   * dispatcher none of its caller's options, so the class rides on a `withPriority` layer,
   * outermost, one per class this request uses.
   */
  #dispatcherFor(own?: string): Dispatcher {
    const cls = own ?? this.#priorityClass;
    const base = this.#baseDispatcher();
    if (cls === undefined) return base;
    const byClass = this.#byClass ?? new Map<string, Dispatcher>();
    this.#byClass = byClass;
    let dispatcher = byClass.get(cls);
    if (dispatcher === undefined) {
      dispatcher = base.compose(withPriority(cls));
      byClass.set(cls, dispatcher);
    }
    return dispatcher;
  }

  #baseDispatcher(): Dispatcher {
    let dispatcher = this.#dispatcher;
    if (dispatcher === undefined) {
      const { perRequest } = this.#shared;
      if (perRequest === undefined) dispatcher = this.#shared.dispatcher;
      else {
        this.#perRequestGate = new Semaphore({ ...perRequest, name: 'perRequest' });
        // Outermost, so a call takes its request's permit first and its partner's second.
        // Partner permits are never held while waiting for a per-request permit, so the
        // two gates cannot wait on each other (fixed order: no deadlock).
        dispatcher = this.#shared.dispatcher.compose(limitGate(this.#perRequestGate));
      }
      this.#dispatcher = dispatcher;
    }
    return dispatcher;
  }
}
