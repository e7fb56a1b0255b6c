/**
 * A reference point for bench/dispatcher.ts, not a limiter to use: the barest gate a wrapping
 * dispatcher can put in front of an Agent. A counter and an array queue; a request that finds
 * the counter at its limit waits in the array, and a response's end hands its slot to the
 * oldest waiter, dispatched from its own immediate in its caller's async context (as
 * LimitedAgent does, so that undici has freed the socket first). Nothing else: no deadline, no
 * queue bound, no abort of a queued request, no stats, no holders list, no maxHold, and it
 * speaks only the callback handler API that undici's `request()` uses.
 *
 * What it measures: whether a gate in front of undici can match `Agent({ connections: N })`'s
 * own queue at all, and so how much of LimitedAgent's gap is the cost of its features.
 */
import { AsyncResource } from 'node:async_hooks';
import { Dispatcher } from 'undici';

interface CallbackHandler {
  onConnect(abort: (reason?: Error) => void, context?: object): void;
  onHeaders(status: number, headers: Buffer[], resume: () => void, text: string): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(trailers: string[] | null): void;
  onError(error: Error): void;
  onUpgrade?(status: number, headers: Buffer[] | string[] | null, socket: unknown): void;
  onBodySent?(chunk: Buffer): void;
  onRequestSent?(): void;
  onResponseStarted?(): void;
}

class BareRequest implements CallbackHandler {
  scope: AsyncResource | undefined = undefined;
  #done = false;

  constructor(
    readonly gate: BareGate,
    readonly opts: Dispatcher.DispatchOptions,
    readonly handler: CallbackHandler,
  ) {}

  onConnect(abort: (reason?: Error) => void, context?: object): void {
    this.handler.onConnect(abort, context);
  }
  onHeaders(status: number, headers: Buffer[], resume: () => void, text: string): boolean {
    return this.handler.onHeaders(status, headers, resume, text);
  }
  onData(chunk: Buffer): boolean {
    return this.handler.onData(chunk);
  }
  onComplete(trailers: string[] | null): void {
    this.#end();
    this.handler.onComplete(trailers);
  }
  onError(error: Error): void {
    this.#end();
    this.handler.onError(error);
  }
  onUpgrade(status: number, headers: Buffer[] | string[] | null, socket: unknown): void {
    this.#end();
    this.handler.onUpgrade?.(status, headers, socket);
  }
  onBodySent(chunk: Buffer): void {
    this.handler.onBodySent?.(chunk);
  }
  onRequestSent(): void {
    this.handler.onRequestSent?.();
  }
  onResponseStarted(): void {
    this.handler.onResponseStarted?.();
  }

  #end(): void {
    if (this.#done) return;
    this.#done = true;
    this.gate.release();
  }

  /** The deferred dispatch of a queued request, in its caller's async context. */
  dispatchQueued(): void {
    this.scope!.runInAsyncScope(this.dispatchNow, this);
  }

  dispatchNow(): boolean {
    return this.gate.inner.dispatch(this.opts, this as unknown as Dispatcher.DispatchHandler);
  }
}

function dispatchQueued(request: BareRequest): void {
  request.dispatchQueued();
}

export class BareGate extends Dispatcher {
  #held = 0;
  #queue: (BareRequest | undefined)[] = [];
  #head = 0;

  constructor(
    readonly inner: Dispatcher,
    readonly limit: number,
  ) {
    super();
  }

  override dispatch(
    opts: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
  ): boolean {
    const request = new BareRequest(this, opts, handler as unknown as CallbackHandler);
    if (this.#held < this.limit && this.#head === this.#queue.length) {
      this.#held++;
      return request.dispatchNow();
    }
    request.scope = handler instanceof AsyncResource ? handler : new AsyncResource('bare-gate');
    this.#queue.push(request);
    return true;
  }

  release(): void {
    this.#held--;
    if (this.#head === this.#queue.length) return;
    const next = this.#queue[this.#head]!;
    this.#queue[this.#head++] = undefined;
    if (this.#head > 1024) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
    this.#held++;
    setImmediate(dispatchQueued, next);
  }

  override close(): Promise<void> {
    return this.inner.close();
  }

  override destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/**
 * The other reference point: a wrapping dispatcher that does nothing at all, not even wrap the
 * handler. What any Dispatcher in front of an Agent costs before it does anything.
 */
export class PassThroughDispatcher extends Dispatcher {
  constructor(readonly inner: Dispatcher) {
    super();
  }

  override dispatch(
    opts: Dispatcher.DispatchOptions,
    handler: Dispatcher.DispatchHandler,
  ): boolean {
    return this.inner.dispatch(opts, handler);
  }

  override close(): Promise<void> {
    return this.inner.close();
  }

  override destroy(): Promise<void> {
    return this.inner.destroy();
  }
}
