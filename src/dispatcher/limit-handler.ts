import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { publishResponse } from '../diagnostics.js';
import { PermitRequest } from './permit-request.js';

type Controller = Dispatcher.DispatchController;
type Handler = Dispatcher.DispatchHandler;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];

/**
 * A permit for a request whose caller speaks undici's controller API (`onRequestStart`, …).
 *
 * It is both the handler the inner dispatcher calls and the controller the caller sees, so a
 * request costs one object: the caller's abort/pause/resume reach the inner controller once
 * there is one. Later callbacks (end-then-error, an undefined controller) release nothing more.
 */
export class LimitHandler extends PermitRequest implements Handler, Controller {
  readonly #handler: Handler;
  #inner: Controller | undefined = undefined;
  #paused = false;
  rawHeaders: Controller['rawHeaders'] = null;
  rawTrailers: Controller['rawTrailers'] = null;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions, handler: Handler) {
    super(dispatch, opts);
    this.#handler = handler;
  }

  protected startEarly(): void {
    this.#handler.onRequestStart?.(this, {});
  }

  protected failCaller(reason: unknown): void {
    this.#handler.onResponseError?.(this, reason as Error);
  }

  protected abortInner(reason: unknown): boolean {
    if (this.#inner === undefined) return false;
    this.#inner.abort(reason as Error);
    return true;
  }

  // --- controller (what the caller sees) ---------------------------------------------------

  get paused(): boolean {
    return this.#paused;
  }
  get reason(): Error | null {
    return this.abortReason as Error | null;
  }
  get aborted(): boolean {
    return this.isAborted;
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
    if (!this.startedEarly) this.#handler.onRequestStart?.(this, context);
    if (this.isAborted) controller.abort(this.abortReason as Error);
    else if (this.#paused) controller.pause();
  }

  onRequestUpgrade(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    socket: Duplex,
  ): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    this.release();
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onRequestUpgrade?.(this, statusCode, headers, socket);
  }

  onResponseStart(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    statusMessage?: string,
  ): void {
    this.progressed();
    publishResponse(this.permit, statusCode, headers); // adaptive limits: RTT and status
    this.rawHeaders = controller?.rawHeaders ?? null;
    this.#handler.onResponseStart?.(this, statusCode, headers, statusMessage);
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    this.progressed();
    this.#handler.onResponseData?.(this, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    this.release();
    this.rawTrailers = controller?.rawTrailers ?? null;
    this.#handler.onResponseEnd?.(this, trailers);
  }

  onResponseError(_controller: Controller | undefined, error: unknown): void {
    this.failed(error);
    this.#handler.onResponseError?.(this, error as Error);
  }
}
