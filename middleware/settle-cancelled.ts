import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';

/*
 * Why this exists (and why it should move into src/dispatcher):
 *
 * When a caller cancels a request that is already at the partner, undici reports the error
 * (which makes limitHosts return the permit, and grant it to the next waiter, which dispatches
 * at once) and only then destroys the socket. The partner learns of the cancellation when it
 * reads the closed connection, a moment later, and can meanwhile receive the next request:
 * it sees cap + 1 at once. Measured on loopback against a partner that counts its own
 * concurrency: about 2% of in-flight cancellations put it over its cap.
 *
 * Placed between limitHosts and the Agent, this interceptor holds back the error of a request
 * the caller cancelled after it started, for three turns of the event loop: the socket is
 * closed by then, and a partner on the same machine has read the close (poll phase) and
 * finished the request (close phase). So the permit lasts as long as the partner's view of the
 * request, as DESIGN.md asks. Requests that end any other way are not delayed.
 */

type Controller = Dispatcher.DispatchController;
type Handler = Dispatcher.DispatchHandler;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];

interface LegacyHandler {
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
  onBodySent?(chunkSize: number, totalBytesSent: number): void;
  onRequestSent?(): void;
}

/** Three event-loop turns: past the close of the socket and a local partner's reaction to it. */
function afterTeardown(fn: () => void): void {
  setImmediate(() => setImmediate(() => setImmediate(fn)));
}

/** The interceptor: compose it inside `limitHosts` (`agent.compose(settleCancelled(), limitHosts(l))`). */
export function settleCancelled(): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) =>
    function settleCancelledDispatch(opts, handler) {
      const legacy = handler as LegacyHandler;
      const wrapped =
        typeof legacy.onHeaders === 'function' && typeof legacy.onConnect === 'function'
          ? new LegacySettle(legacy)
          : new ControllerSettle(handler);
      return dispatch(opts, wrapped as Handler);
    };
}

/** For handlers speaking undici's callback API (what limitHosts passes for request/fetch). */
class LegacySettle implements LegacyHandler {
  readonly #up: LegacyHandler;
  #cancelled = false;

  constructor(up: LegacyHandler) {
    this.#up = up;
  }

  onConnect(abort: (reason?: Error) => void, context?: object): void {
    this.#up.onConnect?.((reason?: Error) => {
      this.#cancelled = true;
      abort(reason);
    }, context);
  }
  onResponseStarted(): void {
    this.#up.onResponseStarted?.();
  }
  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void, text: string): boolean {
    return this.#up.onHeaders?.(statusCode, rawHeaders, resume, text) ?? true;
  }
  onData(chunk: Buffer): boolean {
    return this.#up.onData?.(chunk) ?? true;
  }
  onComplete(trailers: string[] | null): void {
    this.#up.onComplete?.(trailers);
  }
  onError(error: Error): void {
    if (this.#cancelled) afterTeardown(() => this.#up.onError?.(error));
    else this.#up.onError?.(error);
  }
  onUpgrade(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void {
    this.#up.onUpgrade?.(statusCode, rawHeaders, socket);
  }
  onBodySent(chunkSize: number, totalBytesSent: number): void {
    this.#up.onBodySent?.(chunkSize, totalBytesSent);
  }
  onRequestSent(): void {
    this.#up.onRequestSent?.();
  }
}

/** For handlers speaking the controller API. It is also the controller the layer above sees. */
class ControllerSettle implements Handler, Controller {
  readonly #up: Handler;
  #inner: Controller | undefined = undefined;
  #cancelled = false;

  constructor(up: Handler) {
    this.#up = up;
  }

  get aborted(): boolean {
    return this.#inner?.aborted ?? false;
  }
  get paused(): boolean {
    return this.#inner?.paused ?? false;
  }
  get reason(): Error | null {
    return this.#inner?.reason ?? null;
  }
  get rawHeaders(): Controller['rawHeaders'] {
    return this.#inner?.rawHeaders ?? null;
  }
  get rawTrailers(): Controller['rawTrailers'] {
    return this.#inner?.rawTrailers ?? null;
  }
  abort(reason: Error): void {
    this.#cancelled = true;
    this.#inner?.abort(reason);
  }
  pause(): void {
    this.#inner?.pause();
  }
  resume(): void {
    this.#inner?.resume();
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.#inner = controller;
    this.#up.onRequestStart?.(this, context);
  }
  onRequestUpgrade(_c: Controller, statusCode: number, headers: Headers, socket: Duplex): void {
    this.#up.onRequestUpgrade?.(this, statusCode, headers, socket);
  }
  onResponseStart(_c: Controller, statusCode: number, headers: Headers, text?: string): void {
    this.#up.onResponseStart?.(this, statusCode, headers, text);
  }
  onResponseData(_c: Controller, chunk: Buffer): void {
    this.#up.onResponseData?.(this, chunk);
  }
  onResponseEnd(_c: Controller, trailers: Headers): void {
    this.#up.onResponseEnd?.(this, trailers);
  }
  onResponseError(_c: Controller | undefined, error: Error): void {
    if (this.#cancelled) afterTeardown(() => this.#up.onResponseError?.(this, error));
    else this.#up.onResponseError?.(this, error);
  }
}
