import { AsyncResource } from 'node:async_hooks';
import type { Dispatcher } from 'undici';
import type { PermitHoldTimeoutError } from '../common/errors.js';
import { reportRequestError } from '../gate/outcomes.js';
import type { Permit, Semaphore, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { asksWith, callFor } from '../partners/rate-rules.js';
import { type PriorityClassOption, priorityFor } from './priority.js';
import { releaseAfterTeardown } from './teardown.js';
import { loadUndici } from './undici.js';

/*
 * A request's journey through its gate, one phase at a time (it only moves forward):
 *
 *   NEW ─permit free─▶ DISPATCHED ─inner start─▶ STARTED ─end─▶ ENDED ─(late error)─▶ SETTLED
 *    │                     ▲                        └─error─▶ SETTLED
 *    └─no permit─▶ QUEUED ─granted─▶ GRANTED ─next turn─┘
 *   (an abort, a shed or a dispatch that throws: from any phase before ENDED ─▶ SETTLED)
 *
 * The permit goes back exactly once, on leaving STARTED or earlier (at once, or after teardown
 * for a request that reached the partner and failed), and the caller hears exactly one terminal
 * callback from us; later events and aborts are ignored. One exception keeps us transparent: an
 * error undici reports after the end (its answer to a caller whose end callback threw; undici's
 * retry relies on it) is passed on, as undici itself would.
 *
 * "Aborted" is what the request knows, not a guess from an error's name: the caller is always
 * handed our abort (on every path, before dispatch), so every cancellation passes through
 * `#abort`. Until the inner dispatcher starts the request (onConnect / onRequestStart) no
 * request bytes have been sent: an abort then returns the permit and fails the caller at once,
 * and undici's request is aborted as soon as it starts (a connect that hangs holds nothing).
 */
const NEW = 0;
const QUEUED = 1;
const GRANTED = 2;
const DISPATCHED = 3;
const STARTED = 4;
const ENDED = 5;
const SETTLED = 6;

/**
 * One request's claim on its gate, shared by both handler APIs. Subclasses only translate
 * undici's callbacks; the phase, the permit and the settling live here.
 */
export abstract class GatedRequest implements WaitTarget {
  readonly #dispatch: Dispatcher.Dispatch;
  readonly #opts: Dispatcher.DispatchOptions;
  #phase: number = NEW;
  #permit: Permit | undefined = undefined;
  #ticket: WaitTicket | undefined = undefined;
  /** The caller's async context, captured on the waiting path only (the grant runs elsewhere). */
  #scope: AsyncResource | undefined = undefined;
  #aborted = false;
  #abortReason: Error | null = null;
  /** What the gate held at our grant, ours included: the load this request went out under. */
  #heldAtGrant = 0;

  constructor(dispatch: Dispatcher.Dispatch, opts: Dispatcher.DispatchOptions) {
    this.#dispatch = dispatch;
    this.#opts = opts;
  }

  /** The caller's handler: its async scope, when it has one, is the one a grant runs in. */
  protected abstract get callerHandler(): object;
  /** Hands the caller our abort (`onConnect` / `onRequestStart`), before anything is sent. */
  protected abstract startCaller(): void;
  /** The caller's terminal error callback. */
  protected abstract errorCaller(error: Error): void;
  /** Aborts the started inner request (undici's abort, or its controller's). */
  protected abstract abortInner(reason: Error): void;

  /** Whether the caller (or maxHold) aborted this request. */
  get aborted(): boolean {
    return this.#aborted;
  }
  get abortReason(): Error | null {
    return this.#abortReason;
  }
  /** Whether the caller has heard its terminal callback: later events from undici are dropped. */
  get settled(): boolean {
    return this.#phase >= ENDED;
  }

  /** Takes a permit of `gate` (at once, or by waiting) and dispatches. */
  start(gate: Semaphore): boolean {
    this.startCaller();
    if (this.#phase === SETTLED) return true; // the caller aborted from inside onConnect
    const priority = priorityFor(gate, (this.#opts as PriorityClassOption).priorityClass);
    // A classed or costed request asks wait(), which grants at once when free.
    const asks = asksWith(gate, priority);
    const permit = asks ? undefined : gate.tryAcquire();
    if (permit !== undefined) {
      this.#hold(permit);
      return this.#dispatchInner();
    }
    this.#phase = QUEUED;
    // undici's own API handlers (request, stream, pipeline, …) are AsyncResources made in this
    // same synchronous call: their scope is the caller's, and borrowing it spares one of our own.
    const handler = this.callerHandler;
    this.#scope = handler instanceof AsyncResource ? handler : new AsyncResource('hostgate:queued');
    try {
      this.#ticket = gate.wait(this, asks ? callFor(gate, priority, this.#opts) : undefined);
    } catch (error) {
      this.rejected(error); // an unknown priority class, a bad cost: a TypeError naming it
    }
    return true;
  }

  /**
   * WaitTarget: a permit freed up. Called from inside the releasing request's `release()`:
   * dispatching now would run on its stack and in its async context, and before undici has
   * handed that request's socket back to its pool (from a setImmediate: a new connection, 2 ×
   * limit sockets at the partner). One immediate per grant, in our caller's scope: grants
   * batched into one immediate would all run before undici frees the sockets of that turn
   * (40 sockets for 20 permits in limit-hosts.test.ts), where one each interleaves with them.
   */
  granted(permit: Permit): void {
    this.#ticket = undefined;
    this.#phase = GRANTED;
    this.#hold(permit);
    setImmediate(dispatchGranted, this);
  }

  /** WaitTarget: shed, timed out, or cancelled by our own abort. */
  rejected(reason: unknown): void {
    this.#ticket = undefined;
    if (this.#phase === QUEUED) this.#settle(reason as Error, false);
  }

  /** @internal the deferred half of `granted`, in the caller's async context */
  dispatchGranted(): void {
    if (this.#phase !== GRANTED) return; // aborted meanwhile: already settled
    const scope = this.#scope!;
    this.#scope = undefined;
    scope.runInAsyncScope(this.#dispatchInner, this);
  }

  /** The caller's abort, through the controller it was handed. */
  callerAbort(reason?: Error): void {
    this.#abort(reason ?? requestAborted());
  }

  /**
   * The abort function a callback-API caller is handed (`onConnect`). Made here, per request,
   * and not as an arrow-function field: a field would cost every request a closure at
   * construction (and, under tsx/esbuild's keepNames, a `defineProperty` naming it).
   */
  protected callerAbortFunction(): (reason?: Error) => void {
    return (reason) => this.#abort(reason ?? requestAborted());
  }

  #abort(reason: Error): void {
    if (this.#aborted || this.#phase >= ENDED) return;
    this.#aborted = true;
    this.#abortReason = reason;
    switch (this.#phase) {
      case QUEUED:
        this.#ticket!.cancel(reason); // rejected() settles
        return;
      case STARTED:
        // undici reports the failure and tears the connection down inside this call.
        this.abortInner(reason);
        if (!this.settled) this.#settle(reason, true); // an inner that did not report
        return;
      default:
        // NEW, GRANTED, DISPATCHED: nothing has reached the partner.
        this.#settle(reason, false);
    }
  }

  /**
   * The inner dispatcher started the request: from here on bytes may reach the partner. Returns
   * false when the caller must not hear of it (already settled: the request is aborted now).
   */
  protected innerStarted(): boolean {
    if (this.#phase === SETTLED) {
      this.abortInner(this.#abortReason ?? requestAborted());
      return false;
    }
    this.#phase = STARTED;
    return true;
  }

  /** The response ended (or upgraded): true when the caller is to hear it. */
  protected innerEnded(): boolean {
    if (this.#phase >= ENDED) return false;
    this.#phase = ENDED;
    const permit = this.#takePermit();
    permit?.release(this.#aborted ? 'aborted' : 'released');
    return true;
  }

  /** undici reported a failure: settle with it (once). */
  protected innerFailed(error: Error): void {
    if (this.#phase === SETTLED) return;
    if (this.#phase === ENDED) {
      this.#phase = SETTLED;
      this.errorCaller(error);
    } else this.#settle(error, this.#phase === STARTED);
  }

  /** The permit while held (for the adaptive limits' response signal). */
  protected get permit(): Permit | undefined {
    return this.#permit;
  }

  /** Permits the gate held at our grant, ours included (the adaptive limits' response signal). */
  protected get heldAtGrant(): number {
    return this.#heldAtGrant;
  }

  /** Response headers or bytes arrived: maxHold and the stall clock count from here. */
  protected progressed(): void {
    this.#permit?.noteProgress();
  }

  /**
   * The one place a request fails: the permit goes back (after teardown when the request had
   * reached the partner), then the caller hears its terminal error — once.
   */
  #settle(error: Error, reachedPartner: boolean): void {
    this.#phase = SETTLED;
    const permit = this.#takePermit();
    if (permit !== undefined) {
      reportRequestError(permit, error, this.#aborted); // adaptive limits: a timeout is a drop
      const reason = this.#aborted ? 'aborted' : 'released';
      if (reachedPartner) releaseAfterTeardown(permit, reason);
      else permit.release(reason);
    }
    this.errorCaller(error);
  }

  #takePermit(): Permit | undefined {
    const permit = this.#permit;
    if (permit !== undefined) {
      this.#permit = undefined;
      permit.onHoldTimeout = undefined;
    }
    return permit;
  }

  #hold(permit: Permit): void {
    this.#permit = permit;
    this.#heldAtGrant = permit.gate.held;
    // Leak reports get method, origin and path only (no query): the permit reduces it when read.
    permit.request = this.#opts;
    if (permit.gate.maxHold !== undefined) permit.onHoldTimeout = holdTimeoutOf(this);
  }

  /** @internal maxHold passed: the gate is taking the permit back. */
  holdTimedOut(error: PermitHoldTimeoutError): void {
    this.#abort(error);
  }

  #dispatchInner(): boolean {
    this.#phase = DISPATCHED;
    try {
      return this.#dispatch(this.#opts, this as unknown as Dispatcher.DispatchHandler);
    } catch (error) {
      // Thrown by the caller's own terminal callback (undici called it through us): theirs.
      if (this.#phase >= ENDED) throw error;
      this.#settle(error as Error, false);
      return false;
    }
  }
}

/** The permit's `onHoldTimeout`, made only for gates with `maxHold`. */
function holdTimeoutOf(request: GatedRequest): (error: PermitHoldTimeoutError) => void {
  return (error) => request.holdTimedOut(error);
}

function dispatchGranted(request: GatedRequest): void {
  request.dispatchGranted();
}

/** undici's own error for an abort without a reason, as undici itself would report it. */
function requestAborted(): Error {
  return new (loadUndici().errors.RequestAbortedError)();
}
