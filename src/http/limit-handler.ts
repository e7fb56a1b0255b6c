import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { reportResponse } from '../gate/outcomes.js';
import { GatedRequest } from './gated-request.js';

type Controller = Dispatcher.DispatchController;
type Handler = Dispatcher.DispatchHandler;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];
/** undici 8's request-side events; undici 7's types declare another `onBodySent` signature. */
interface RequestSideEvents {
  onBodySent?(chunk: unknown): void;
  onRequestSent?(): void;
}

/**
 * A gated request whose caller speaks undici's controller API (`onRequestStart`, …). It is also
 * the controller the caller is handed (one object per request, not two): outer handlers may
 * change that object (undici's `dump` replaces `controller.abort`), and none of the gate's own
 * paths go through its public `abort`, `pause` or `resume`.
 */
export class LimitHandler extends GatedRequest implements Handler, Controller {
  readonly #handler: Handler;
  #inner: Controller | undefined = undefined;
  #paused = false;
  rawHeaders: Controller['rawHeaders'] = null;
  rawTrailers: Controller['rawTrailers'] = null;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions, handler: Handler) {
    super(dispatch, opts);
    this.#handler = handler;
  }

  // The caller's controller: its abort, pause and resume reach the request through here.

  get paused(): boolean {
    return this.#paused;
  }
  get reason(): Error | null {
    return this.abortReason;
  }

  abort(reason?: Error): void {
    this.callerAbort(reason);
  }

  pause(): void {
    this.#paused = true;
    this.#inner?.pause();
  }

  resume(): void {
    this.#paused = false;
    this.#inner?.resume();
  }

  protected get callerHandler(): object {
    return this.#handler;
  }

  protected startCaller(): void {
    this.#handler.onRequestStart?.(this, {});
  }

  protected errorCaller(error: Error): void {
    this.#handler.onResponseError?.(this, error);
  }

  protected abortInner(reason: Error): void {
    this.#inner?.abort(reason);
  }

  onRequestStart(controller: Controller): void {
    this.#inner = controller;
    if (this.innerStarted() && this.#paused) controller.pause();
  }

  onRequestUpgrade(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    socket: Duplex,
  ): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    if (!this.innerEnded()) return;
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onRequestUpgrade?.(this, statusCode, headers, socket);
  }

  /**
   * Request-side events pass straight through (undici 8 calls them on controller-API handlers;
   * undici 7 only on callback-API ones, so there they do not reach us).
   */
  onBodySent(chunk: unknown): void {
    if (!this.settled) (this.#handler as RequestSideEvents).onBodySent?.(chunk);
  }

  onRequestSent(): void {
    if (!this.settled) (this.#handler as RequestSideEvents).onRequestSent?.();
  }

  onResponseStarted(): void {
    if (!this.settled) this.#handler.onResponseStarted?.();
  }

  onResponseStart(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    statusMessage?: string,
  ): void {
    if (this.settled) return;
    this.progressed();
    reportResponse(this.permit, statusCode, headers, this.heldAtGrant); // adaptive: RTT, status, load
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onResponseStart?.(this, statusCode, headers, statusMessage);
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    if (this.settled) return;
    this.progressed();
    this.#handler.onResponseData?.(this, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    if (!this.innerEnded()) return;
    this.rawTrailers = controller?.rawTrailers ?? null;
    this.#handler.onResponseEnd?.(this, trailers);
  }

  onResponseError(_controller: Controller | undefined, error: Error): void {
    this.innerFailed(error);
  }
}
