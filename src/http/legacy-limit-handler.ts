import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { reportResponse } from '../gate/outcomes.js';
import { GatedRequest } from './gated-request.js';

/** undici's callback handler API, which its own `request`, `stream` and `fetch` still speak. */
export interface LegacyHandler {
  onConnect?(abort: (reason?: Error) => void, context?: object): void;
  onResponseStarted?(): void;
  onHeaders?(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean;
  onData?(chunk: Buffer): boolean;
  onComplete?(trailers: string[] | null): void;
  onError?(error: Error): void;
  onUpgrade?(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void;
  /** A chunk of the request body was written (undici passes the chunk). */
  onBodySent?(chunk: Buffer): void;
  /** The whole request body was written. */
  onRequestSent?(): void;
}

/**
 * A gated request whose caller speaks undici's callback API. Passing those callbacks straight
 * through spares undici converting headers to objects and back on every response, which costs
 * more than the whole limiter; the inner dispatcher uses this handler as it is.
 */
export class LegacyLimitHandler extends GatedRequest implements LegacyHandler {
  readonly #handler: LegacyHandler;
  #abortInner: ((reason?: Error) => void) | undefined = undefined;

  constructor(
    dispatch: Dispatcher.Dispatch,
    opts: Dispatcher.DispatchOptions,
    handler: LegacyHandler,
  ) {
    super(dispatch, opts);
    this.#handler = handler;
  }

  protected get callerHandler(): object {
    return this.#handler;
  }

  protected startCaller(): void {
    // No context, as undici's own Request hands its handler none.
    this.#handler.onConnect?.(this.callerAbortFunction());
  }

  protected errorCaller(error: Error): void {
    this.#handler.onError?.(error);
  }

  protected abortInner(reason: Error): void {
    this.#abortInner?.(reason);
  }

  onConnect(abort: (reason?: Error) => void): void {
    this.#abortInner = abort;
    this.innerStarted();
  }

  onBodySent(chunk: Buffer): void {
    if (!this.settled) this.#handler.onBodySent?.(chunk);
  }

  onRequestSent(): void {
    if (!this.settled) this.#handler.onRequestSent?.();
  }

  onResponseStarted(): void {
    if (!this.settled) this.#handler.onResponseStarted?.();
  }

  onHeaders(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean {
    if (this.settled) return true;
    this.progressed();
    reportResponse(this.permit, statusCode, rawHeaders, this.heldAtGrant); // adaptive: RTT, status, load
    return this.#handler.onHeaders?.(statusCode, rawHeaders, resume, statusText) ?? true;
  }

  onData(chunk: Buffer): boolean {
    if (this.settled) return true;
    this.progressed();
    return this.#handler.onData?.(chunk) ?? true;
  }

  onComplete(trailers: string[] | null): void {
    if (this.innerEnded()) this.#handler.onComplete?.(trailers);
  }

  onError(error: Error): void {
    this.innerFailed(error);
  }

  onUpgrade(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    if (this.innerEnded()) this.#handler.onUpgrade?.(statusCode, rawHeaders, socket);
  }
}
