import type { PermitHoldTimeoutError } from '../common/errors.js';
import type { PermitRequestInfo } from '../gate/diagnostics.js';
import { reportRequestError, reportResponse } from '../gate/outcomes.js';
import type { Permit, Semaphore, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { runHolding } from '../partners/gate-layers.js';
import { asksWith, callFor } from '../partners/rate-rules.js';
import { type AbortWatcher, unwatchAbort, watchAbort } from './abort-watch.js';
import {
  type CallableFetch,
  type InitLike,
  NULL_BODY_STATUSES,
  type ResponseLike,
  rebuild,
} from './fetch-response.js';
import { releaseAfterTeardown } from './teardown.js';

/*
 * One limitFetch call's permit, phase by phase (forward only), as GatedRequest for limitHosts:
 *
 *   NEW ──free──▶ GRANTED ──run──▶ FETCHING ──response──▶ STREAMING ──end / error / cancel──▶ DONE
 *    └─▶ QUEUED ──granted──┘
 *
 * `#settle` is the one exit: the permit goes back once, at once when nothing was sent or the body
 * ended, else by the teardown policy (src/http/teardown.ts) once the fetch has reported the
 * request over: its promise rejected, its body errored, or its body's `cancel()` settled. The
 * caller hears of the end (a rejection, an error or the end of the body, its `cancel()`
 * resolving) only once the permit is back, so a caller that retries never meets its own
 * permit. Aborted means the caller's signal fired, the caller cancelled the body, or maxHold
 * passed (then the gate has taken the permit back already).
 */
const NEW = 0;
const QUEUED = 1;
const GRANTED = 2;
const FETCHING = 3;
const STREAMING = 4;
const DONE = 5;

const RELEASED = Promise.resolve();

export class FetchCall implements WaitTarget, AbortWatcher {
  readonly #caller: AbortSignal | undefined;
  /** The signal `fetchFn` gets: follows the caller's, and fires on `maxHold`. */
  readonly #own = new AbortController();
  readonly #request: PermitRequestInfo;
  #phase = NEW;
  #permit: Permit | undefined = undefined;
  #ticket: WaitTicket | undefined = undefined;
  #waiting: { resolve(): void; reject(reason: unknown): void } | undefined = undefined;
  #aborted = false;
  #abortReason: unknown = undefined;
  /** What the gate held at our grant, ours included: the load this request went out under. */
  #heldAtGrant = 0;
  /** The original body, once the response has arrived. */
  #reader: ReadableStreamDefaultReader<Uint8Array> | undefined = undefined;
  /** The body the caller reads. */
  #body: ReadableStreamDefaultController<Uint8Array> | undefined = undefined;
  /** Settled, after a teardown: resolves once the permit is back. */
  #released: Promise<void> | undefined = undefined;

  constructor(caller: AbortSignal | undefined, request: PermitRequestInfo) {
    this.#caller = caller;
    this.#request = request;
  }

  /** Takes a permit of `gate`: `undefined` when one was free, else a promise of the grant. */
  acquire(gate: Semaphore, priority?: string): Promise<void> | undefined {
    if (this.#caller !== undefined) watchAbort(this.#caller, this);
    // A classed or costed call asks wait(), which grants at once when free.
    const asks = asksWith(gate, priority);
    const permit = asks ? undefined : gate.tryAcquire();
    if (permit !== undefined) {
      this.#hold(permit);
      return undefined;
    }
    this.#phase = QUEUED;
    // Awaited by the caller: it resumes in its own async context, not the releaser's.
    return new Promise<void>((resolve, reject) => {
      this.#waiting = { resolve, reject };
      try {
        const call = asks ? callFor(gate, priority, this.#request) : undefined;
        this.#ticket = gate.wait(this, call);
      } catch (error) {
        this.rejected(error); // an unknown priority class, a bad cost: a TypeError naming it
      }
    });
  }

  granted(permit: Permit): void {
    this.#ticket = undefined;
    this.#hold(permit);
    this.#waiting!.resolve();
  }

  rejected(reason: unknown): void {
    this.#ticket = undefined;
    this.#phase = DONE;
    if (this.#caller !== undefined) unwatchAbort(this.#caller, this);
    this.#waiting!.reject(reason);
  }

  signalAborted(reason: unknown): void {
    this.#abort(reason);
  }

  /** @internal maxHold passed: the gate is taking the permit back. */
  holdTimedOut(error: PermitHoldTimeoutError): void {
    this.#abort(error);
  }

  async run(
    fetchFn: CallableFetch,
    input: unknown,
    init: InitLike | undefined,
    limiter: object,
  ): Promise<unknown> {
    if (this.#aborted) throw this.#abortReason; // between the grant and now: nothing sent
    this.#phase = FETCHING;
    const permit = this.#permit!;
    let response: ResponseLike;
    try {
      response = await runHolding(limiter, permit.gate, () =>
        fetchFn(input, { ...init, signal: this.#own.signal }),
      );
    } catch (error) {
      if (this.#phase !== DONE) {
        reportRequestError(permit, error, this.#aborted); // adaptive limits: a timeout is a drop
        this.#settle(true);
      }
      await this.#whenReleased();
      throw error;
    }
    if (this.#aborted) {
      // A fetchFn that resolved in spite of the abort: its response is not the caller's.
      const body = response.body as ReadableStream | null | undefined;
      this.#settle(true, body?.cancel?.());
      await this.#whenReleased();
      throw this.#abortReason;
    }
    permit.noteProgress(); // the partner answered
    reportResponse(permit, response.status, response.headers, this.#heldAtGrant); // adaptive: RTT, status, load
    try {
      return this.#take(response);
    } catch (error) {
      this.#settle(true, this.#reader?.cancel(error));
      await this.#whenReleased();
      throw error;
    }
  }

  #abort(reason: unknown): void {
    if (this.#aborted || this.#phase === DONE) return;
    this.#aborted = true;
    this.#abortReason = reason;
    switch (this.#phase) {
      case QUEUED:
        this.#ticket!.cancel(reason); // rejected() settles
        return;
      case FETCHING:
        this.#own.abort(reason); // run() settles when fetchFn reports it (rejects, or resolves)
        return;
      case STREAMING:
        // Nobody may be reading to notice the abort: end the body from this side too.
        this.#own.abort(reason);
        this.#settle(true, this.#reader!.cancel(reason));
        this.#whenReleased().then(() => this.#errorBody(reason));
        return;
      default:
        this.#settle(false); // GRANTED: run() has not called fetchFn yet
    }
  }

  #take(response: ResponseLike): unknown {
    const body = response.body;
    if (body == null || NULL_BODY_STATUSES.has(response.status)) {
      this.#settle(false);
      return response;
    }
    if (typeof body.getReader !== 'function') {
      throw new TypeError(
        'limitFetch: fetchFn returned a Response whose body is not a WHATWG ReadableStream',
      );
    }
    this.#reader = body.getReader();
    this.#phase = STREAMING;
    const wrapped = new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          this.#body = controller;
        },
        pull: () => this.#pull(),
        cancel: (reason) => this.#cancel(reason),
      },
      { highWaterMark: 0 },
    );
    return rebuild(response, wrapped);
  }

  async #pull(): Promise<void> {
    const reader = this.#reader!;
    const body = this.#body!;
    let chunk: Awaited<ReturnType<typeof reader.read>>;
    try {
      chunk = await reader.read();
    } catch (error) {
      if (this.#phase === DONE) return;
      this.#settle(true);
      await this.#whenReleased();
      body.error(error);
      return;
    }
    if (this.#phase === DONE) return; // aborted (maxHold, caller) while this read was pending
    if (chunk.done) {
      this.#settle(false); // before close(): once the caller sees the end, the permit is back
      body.close();
    } else {
      this.#permit?.noteProgress();
      body.enqueue(chunk.value);
    }
  }

  /** The caller cancelled the body: a cancellation like an abort, with the same teardown. */
  #cancel(reason: unknown): Promise<void> {
    const cancelled = this.#reader!.cancel(reason); // settles once the fetch has aborted
    if (this.#phase === DONE) return cancelled;
    this.#aborted = true;
    this.#settle(true, cancelled);
    return this.#whenReleased().then(() => cancelled);
  }

  /** Resolves once the permit is back (at once when it went back without a teardown). */
  #whenReleased(): Promise<void> {
    return this.#released ?? RELEASED;
  }

  #errorBody(reason: unknown): void {
    try {
      this.#body?.error(reason);
    } catch {
      // already closed or errored
    }
  }

  #hold(permit: Permit): void {
    this.#phase = GRANTED;
    this.#permit = permit;
    this.#heldAtGrant = permit.gate.held;
    permit.request = this.#request; // reduced by the permit: method, origin, path; no query
    if (permit.gate.maxHold !== undefined) permit.onHoldTimeout = holdTimeoutOf(this);
  }

  /**
   * The one exit. `reachedPartner`: the request may be open at the partner, so the permit
   * waits for teardown (after `reported` settles: the fetch's own account that it is over);
   * otherwise (nothing sent, or the body ended) it returns at once.
   */
  #settle(reachedPartner: boolean, reported?: Promise<unknown>): void {
    this.#phase = DONE;
    if (this.#caller !== undefined) unwatchAbort(this.#caller, this);
    const permit = this.#permit;
    if (permit === undefined) return;
    this.#permit = undefined;
    permit.onHoldTimeout = undefined;
    const reason = this.#aborted ? 'aborted' : 'released';
    if (reachedPartner) this.#released = releaseAfterTeardown(permit, reason, reported);
    else permit.release(reason);
  }
}

/** The permit's `onHoldTimeout`, made only for gates with `maxHold` (no closure per call otherwise). */
function holdTimeoutOf(call: FetchCall): (error: PermitHoldTimeoutError) => void {
  return (error) => call.holdTimedOut(error);
}
