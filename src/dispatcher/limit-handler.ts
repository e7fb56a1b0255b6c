import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { publishResponse } from '../diagnostics.js';
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
 * A gated request whose caller speaks undici's controller API (`onRequestStart`, …). The caller
 * gets a {@link GateController} of its own: outer handlers may change that object (undici's
 * `dump` replaces `controller.abort`), and none of the gate's own paths go through it.
 */
export class LimitHandler extends GatedRequest implements Handler {
  readonly #handler: Handler;
  readonly #controller: GateController;
  #inner: Controller | undefined = undefined;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions, handler: Handler) {
    super(dispatch, opts);
    this.#handler = handler;
    this.#controller = new GateController(this);
  }

  protected startCaller(): void {
    this.#handler.onRequestStart?.(this.#controller, {});
  }

  protected errorCaller(error: Error): void {
    this.#handler.onResponseError?.(this.#controller, error);
  }

  protected abortInner(reason: Error): void {
    this.#inner?.abort(reason);
  }

  /** @internal the caller's pause and resume, once the inner request exists */
  get inner(): Controller | undefined {
    return this.#inner;
  }

  onRequestStart(controller: Controller): void {
    this.#inner = controller;
    if (this.innerStarted() && this.#controller.paused) controller.pause();
  }

  onRequestUpgrade(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    socket: Duplex,
  ): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    if (!this.innerEnded()) return;
    this.#controller.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onRequestUpgrade?.(this.#controller, statusCode, headers, socket);
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
    publishResponse(this.permit, statusCode, headers); // adaptive limits: RTT and status
    this.#controller.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onResponseStart?.(this.#controller, statusCode, headers, statusMessage);
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    if (this.settled) return;
    this.progressed();
    this.#handler.onResponseData?.(this.#controller, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    if (!this.innerEnded()) return;
    this.#controller.rawTrailers = controller?.rawTrailers ?? null;
    this.#handler.onResponseEnd?.(this.#controller, trailers);
  }

  onResponseError(_controller: Controller | undefined, error: Error): void {
    this.innerFailed(error);
  }
}

/** The controller the caller sees: its abort, pause and resume reach the request through here. */
class GateController implements Controller {
  readonly #request: LimitHandler;
  #paused = false;
  rawHeaders: Controller['rawHeaders'] = null;
  rawTrailers: Controller['rawTrailers'] = null;

  constructor(request: LimitHandler) {
    this.#request = request;
  }

  get paused(): boolean {
    return this.#paused;
  }
  get aborted(): boolean {
    return this.#request.aborted;
  }
  get reason(): Error | null {
    return this.#request.abortReason;
  }

  abort(reason?: Error): void {
    this.#request.callerAbort(reason);
  }

  pause(): void {
    this.#paused = true;
    this.#request.inner?.pause();
  }

  resume(): void {
    this.#paused = false;
    this.#request.inner?.resume();
  }
}
