import type { Dispatcher } from 'undici';
import { publishRequestError } from '../diagnostics.js';
import type { PermitHoldTimeoutError } from '../errors.js';
import type { Permit, Semaphore, WaitTarget, WaitTicket } from '../semaphore.js';

/**
 * One request's claim on its gate, shared by both handler APIs: take a permit (at once or
 * after waiting), dispatch, and give the permit back exactly once however the request ends.
 *
 * An abort that arrives before the inner request has started (while queued or connecting)
 * is kept and applied as soon as it starts; while queued it cancels the wait at once.
 */
export abstract class PermitRequest implements WaitTarget {
  protected readonly dispatch: Dispatcher.Dispatch;
  protected readonly opts: Dispatcher.DispatchOptions;
  protected permit: Permit | undefined = undefined;
  protected isAborted = false;
  protected abortReason: unknown = null;
  /** The caller was handed our abort before dispatch (the waiting path). */
  protected startedEarly = false;
  #ticket: WaitTicket | undefined = undefined;
  #failed = false;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions) {
    this.dispatch = dispatch;
    this.opts = opts;
  }

  /** Hands the caller a way to abort before dispatch (fetch passes dispatchers no signal). */
  protected abstract startEarly(): void;
  /** Tells the caller its request failed before the inner dispatcher saw it. */
  protected abstract failCaller(reason: unknown): void;
  /** Aborts the inner request, if it has started; true when it had. */
  protected abstract abortInner(reason: unknown): boolean;

  /** Fast path: a permit was free. */
  dispatchWith(permit: Permit): boolean {
    this.#hold(permit);
    return this.#dispatchInner();
  }

  /** Waiting path: the caller can abort first, then we take our place in the queue. */
  wait(gate: Semaphore): boolean {
    this.startedEarly = true;
    this.startEarly();
    if (this.isAborted) this.#fail(this.abortReason);
    else this.#ticket = gate.wait(this);
    return true;
  }

  /**
   * WaitTarget: a permit freed up. Called from inside the gate, usually while undici is still
   * finishing the response that released it; undici hands that socket back to its pool from
   * a setImmediate, so dispatching now would open a new connection (2 × limit sockets at the
   * partner). One immediate per grant, queued behind undici's: the socket is free by then.
   */
  granted(permit: Permit): void {
    this.#ticket = undefined;
    this.#hold(permit);
    setImmediate(dispatchGranted, this);
  }

  /** @internal the deferred half of `granted` */
  dispatchGranted(): void {
    if (this.isAborted) this.#fail(this.abortReason);
    else this.#dispatchInner();
  }

  /** WaitTarget: shed, timed out, or cancelled by our own abort. */
  rejected(reason: unknown): void {
    this.#ticket = undefined;
    this.#fail(reason);
  }

  abort(reason: unknown): void {
    if (this.isAborted) return;
    this.isAborted = true;
    this.abortReason = reason;
    if (this.abortInner(reason)) return;
    this.#ticket?.cancel(reason);
    // Dispatched but not started yet: applied when the inner request starts.
  }

  /**
   * Returns the permit; every exit path calls this, and only the first call does anything.
   * `error` is how the request failed: an abort by the caller is counted as one.
   */
  protected release(error?: unknown): void {
    const permit = this.permit;
    if (permit !== undefined) {
      this.permit = undefined;
      permit.onHoldTimeout = undefined;
      permit.release(this.isAborted || isAbort(error) ? 'aborted' : 'released');
    }
  }

  /**
   * The request failed: return the permit — but a request the caller cancelled keeps it until
   * the connection is down ({@link afterTeardown}), or the partner could meet the next request
   * before it has seen this one close.
   */
  protected failed(error: unknown): void {
    publishRequestError(this.permit, error); // adaptive limits: a timeout is a drop
    if (this.permit !== undefined && (this.isAborted || isAbort(error))) {
      afterTeardown(() => this.release(error));
    } else {
      this.release(error);
    }
  }

  /** Response headers or bytes arrived: the gate's stall clock moves (leak signature). */
  protected progressed(): void {
    this.permit?.noteProgress();
  }

  #hold(permit: Permit): void {
    this.permit = permit;
    permit.request = this.opts; // a reference: method, origin and path for leak reports
    if (permit.gate.maxHold !== undefined) {
      permit.onHoldTimeout = (error: PermitHoldTimeoutError) => this.abort(error);
    }
  }

  #dispatchInner(): boolean {
    try {
      return this.dispatch(this.opts, this as unknown as Dispatcher.DispatchHandler);
    } catch (error) {
      this.#fail(error);
      return false;
    }
  }

  #fail(reason: unknown): void {
    if (this.#failed) return;
    this.#failed = true;
    this.release();
    this.failCaller(reason);
  }
}

function dispatchGranted(request: PermitRequest): void {
  request.dispatchGranted();
}

/**
 * Runs `fn` three event-loop turns from now. undici reports a cancelled request before it
 * destroys the socket; by the third turn the socket is closed and a partner on the same host
 * has read the close (poll phase) and finished the request (close phase). A remote partner
 * learns of it a network round trip later: that overlap no client-side limiter can close.
 */
export function afterTeardown(fn: () => void): void {
  setImmediate(() => setImmediate(() => setImmediate(fn)));
}

/**
 * An error that means the caller cancelled: its signal's reason (`AbortError`, `TimeoutError`,
 * hostgate's `ClientDisconnectedError` and `DeadlineExceededError`) or undici's `RequestAbortedError`. On the fast path the
 * caller holds undici's own abort, so the error is all there is to tell it by.
 */
function isAbort(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { name, code } = error as { name?: unknown; code?: unknown };
  return (
    name === 'AbortError' ||
    name === 'TimeoutError' ||
    code === 'UND_ERR_ABORTED' ||
    code === 'HOSTGATE_CLIENT_DISCONNECTED' ||
    code === 'HOSTGATE_DEADLINE_EXCEEDED'
  );
}
