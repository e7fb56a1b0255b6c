import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { PermitHoldTimeoutError } from '../errors.js';
import type { Permit, Semaphore } from '../semaphore.js';

type Controller = Dispatcher.DispatchController;
type Handler = Dispatcher.DispatchHandler;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];

/**
 * Holds one permit for one request, from dispatch until the response has ended or failed.
 *
 * It is both the handler the inner dispatcher calls and the controller the caller sees, so a
 * request costs one object: the caller's abort/pause/resume reach the inner controller once
 * there is one, and an abort that arrives earlier (while queued or connecting) is kept and
 * applied as soon as the inner request starts. Every exit path funnels into `#release`, which
 * runs once; later callbacks (end-then-error, an undefined controller) change nothing.
 */
export class LimitHandler implements Handler, Controller {
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  readonly #handler: Handler;
  #permit: Permit | undefined = undefined;
  #inner: Controller | undefined = undefined;
  /** The caller got our controller before dispatch (the waiting path). */
  #startedEarly = false;
  /** Abort for a queued request: removes its waiter from the gate's queue at once. */
  #waiting: AbortController | undefined = undefined;
  #aborted = false;
  #reason: unknown = null;
  #paused = false;
  #settled = false;
  rawHeaders: Controller['rawHeaders'] = null;
  rawTrailers: Controller['rawTrailers'] = null;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions, handler: Handler) {
    this.#dispatch = dispatch;
    this.#opts = opts;
    this.#handler = handler;
  }

  /** Fast path: a permit was free. */
  dispatchWith(permit: Permit): boolean {
    this.#hold(permit);
    return this.#dispatchInner();
  }

  /**
   * Waiting path. The caller learns of our controller first, so that its abort reaches the
   * queue (fetch passes no signal to dispatchers; see NOTES.md).
   */
  wait(gate: Semaphore): boolean {
    this.#startedEarly = true;
    this.#handler.onRequestStart?.(this, {});
    if (this.#aborted) {
      this.#fail(this.#reason);
      return true;
    }
    const waiting = new AbortController();
    this.#waiting = waiting;
    gate.acquire({ signal: waiting.signal }).then(
      (permit) => {
        this.#waiting = undefined;
        this.#hold(permit);
        this.#dispatchInner();
      },
      (error: unknown) => {
        this.#waiting = undefined;
        this.#fail(this.#aborted ? this.#reason : error);
      },
    );
    return true;
  }

  #hold(permit: Permit): void {
    this.#permit = permit;
    if (permit.gate.maxHold !== undefined) permit.onHoldTimeout = this.#onHoldTimeout;
  }

  readonly #onHoldTimeout = (error: PermitHoldTimeoutError): void => {
    this.abort(error);
  };

  #dispatchInner(): boolean {
    try {
      return this.#dispatch(this.#opts, this);
    } catch (error) {
      this.onResponseError(undefined, error);
      return false;
    }
  }

  #release(): void {
    const permit = this.#permit;
    if (permit !== undefined) {
      this.#permit = undefined;
      permit.onHoldTimeout = undefined;
      permit.release();
    }
  }

  /** Ends a request that never reached the inner dispatcher. */
  #fail(reason: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#release();
    this.#handler.onResponseError?.(this, reason as Error);
  }

  // --- controller (what the caller sees) ---------------------------------------------------

  get aborted(): boolean {
    return this.#aborted;
  }
  get paused(): boolean {
    return this.#paused;
  }
  get reason(): Error | null {
    return this.#reason as Error | null;
  }

  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    if (this.#inner !== undefined) this.#inner.abort(reason as Error);
    else if (this.#waiting !== undefined) this.#waiting.abort(reason);
    // Dispatched but not yet started: applied in onRequestStart.
  }

  pause(): void {
    this.#paused = true;
    this.#inner?.pause();
  }

  resume(): void {
    this.#paused = false;
    this.#inner?.resume();
  }

  // --- handler (what the inner dispatcher calls) -------------------------------------------

  onRequestStart(controller: Controller, context: unknown): void {
    this.#inner = controller;
    if (!this.#startedEarly) this.#handler.onRequestStart?.(this, context);
    if (this.#aborted) controller.abort(this.#reason as Error);
    else if (this.#paused) controller.pause();
  }

  onRequestUpgrade(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    socket: Duplex,
  ): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    this.#settled = true;
    this.#release();
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onRequestUpgrade?.(this, statusCode, headers, socket);
  }

  onResponseStart(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    statusMessage?: string,
  ): void {
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onResponseStart?.(this, statusCode, headers, statusMessage);
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    this.#handler.onResponseData?.(this, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    this.#settled = true;
    this.#release();
    this.rawTrailers = controller?.rawTrailers ?? null;
    this.#handler.onResponseEnd?.(this, trailers);
  }

  onResponseError(_controller: Controller | undefined, error: unknown): void {
    this.#settled = true;
    this.#release();
    this.#handler.onResponseError?.(this, error as Error);
  }
}
