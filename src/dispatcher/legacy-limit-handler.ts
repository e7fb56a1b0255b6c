import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { publishResponse } from '../diagnostics.js';
import { PermitRequest } from './permit-request.js';

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
}

/**
 * A permit for a request whose caller speaks undici's callback API. Passing those callbacks
 * straight through spares undici converting headers to objects and back on every response,
 * which costs more than the whole limiter; the inner dispatcher uses this handler as it is.
 */
export class LegacyLimitHandler extends PermitRequest implements LegacyHandler {
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

  protected startEarly(): void {
    this.#handler.onConnect?.((reason?: Error) => this.abort(reason), {});
  }

  protected failCaller(reason: unknown): void {
    this.#handler.onError?.(reason as Error);
  }

  protected abortInner(reason: unknown): boolean {
    if (this.#abortInner === undefined) return false;
    this.#abortInner(reason as Error);
    return true;
  }

  onConnect(abort: (reason?: Error) => void, context?: object): void {
    this.#abortInner = abort;
    // On the fast path the caller gets undici's own abort: its abort needs no detour through us.
    if (!this.startedEarly) this.#handler.onConnect?.(abort, context);
    if (this.isAborted) abort(this.abortReason as Error);
  }

  onResponseStarted(): void {
    this.#handler.onResponseStarted?.();
  }

  onHeaders(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean {
    this.progressed();
    publishResponse(this.permit, statusCode, rawHeaders); // adaptive limits: RTT and status
    return this.#handler.onHeaders?.(statusCode, rawHeaders, resume, statusText) ?? true;
  }

  onData(chunk: Buffer): boolean {
    this.progressed();
    return this.#handler.onData?.(chunk) ?? true;
  }

  onComplete(trailers: string[] | null): void {
    this.release();
    this.#handler.onComplete?.(trailers);
  }

  onError(error: Error): void {
    this.failed(error);
    this.#handler.onError?.(error);
  }

  onUpgrade(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void {
    // The partner answered; the socket now belongs to the caller's protocol.
    this.release();
    this.#handler.onUpgrade?.(statusCode, rawHeaders, socket);
  }
}
