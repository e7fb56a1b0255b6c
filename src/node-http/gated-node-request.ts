import { AsyncResource } from 'node:async_hooks';
import type { ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import type { Socket } from 'node:net';
import type { PermitHoldTimeoutError } from '../common/errors.js';
import { afterAtLeast } from '../gate/clock.js';
import { reportRequestError, reportResponse } from '../gate/outcomes.js';
import type { Permit, Semaphore, WaitTarget, WaitTicket } from '../gate/semaphore.js';
import { holdAfterAbortOf } from '../partners/gate-layers.js';
import { asksWith, callFor } from '../partners/rate-rules.js';

/*
 * One node:http request's claim on its gate, one phase at a time (it only moves forward):
 *
 *   NEW ─permit free─▶ SENT ─req 'close'─▶ DONE
 *    └─no permit─▶ QUEUED ─granted─▶ GRANTED ─next microtask─▶ SENT
 *   (a shed, or a destroy() before SENT: ─▶ DONE at once, the permit straight back)
 *
 * Until SENT the wrapped agent has not seen the request: no socket, no byte to the partner, so
 * a destroy() returns the permit at once and the request fails as Node fails a request that
 * never got a socket. From SENT on the permit returns on the request's 'close' event: Node
 * emits it once the socket is closed on our side (an abort, an error, no keep-alive) or, for a
 * keep-alive socket, just before handing the socket back to its pool ('free', same tick). The
 * release runs in the microtask after that event, so the next waiter's request finds the socket
 * already free instead of opening another one.
 *
 * What is not listened to, on purpose: 'response' (Node dumps a response nobody listens for,
 * and a listener of ours would keep it unread), 'error' (a listener would swallow the caller's
 * unhandled error), 'upgrade'/'connect' (Node destroys the socket when nobody listens).
 * Response progress comes from the socket's 'data' (Node's own parser listens there first, so
 * `req.res` is set by the time we hear it), and a destroy() is heard by wrapping the request's
 * own `destroy` (Node's abort signal, `req.abort()`, axios and got all end there).
 */
const NEW = 0;
const QUEUED = 1;
const GRANTED = 2;
const SENT = 3;
const DONE = 4;

/** Hands a request to the wrapped agent: `inner.addRequest(req, options)`. */
export type AddRequest = (req: ClientRequest, options: RequestOptions) => void;

const kGated = Symbol('hostgate.gatedRequest');
type Gated = { [kGated]?: GatedNodeRequest | undefined };
type Destroy = (this: ClientRequest, error?: Error) => ClientRequest;
/** Node's own error delivery for a request that got no socket: 'error' (if any), then 'close'. */
type OnSocket = (socket: Socket | null, error?: Error) => void;

export class GatedNodeRequest implements WaitTarget {
  readonly #req: ClientRequest;
  readonly #options: RequestOptions;
  readonly #addRequest: AddRequest;
  /** The request's `destroy` before ours replaced it. */
  readonly #destroy: Destroy;
  #phase = NEW;
  #permit: Permit | undefined = undefined;
  #ticket: WaitTicket | undefined = undefined;
  #scope: AsyncResource | undefined = undefined;
  #socket: (Socket & Gated) | undefined = undefined;
  #aborted = false;
  #responded = false;
  #failed = false;
  #destroyError: Error | undefined = undefined;
  #heldAtGrant = 0;

  constructor(req: ClientRequest, options: RequestOptions, addRequest: AddRequest) {
    this.#req = req;
    this.#options = options;
    this.#addRequest = addRequest;
    this.#destroy = req.destroy as Destroy;
    (req as ClientRequest & Gated)[kGated] = this;
    req.destroy = gatedDestroy as ClientRequest['destroy'];
  }

  /** Takes a permit of `gate` (at once, or by waiting), then hands the request on. */
  start(gate: Semaphore): void {
    const asks = asksWith(gate, undefined); // a partner rule's cost: asked through wait()
    const permit = asks ? undefined : gate.tryAcquire();
    if (permit !== undefined) {
      this.#hold(permit);
      this.#send();
      return;
    }
    this.#phase = QUEUED;
    this.#scope = new AsyncResource('hostgate:queued');
    try {
      this.#ticket = gate.wait(
        this,
        asks ? callFor(gate, undefined, this.#costRequest()) : undefined,
      );
    } catch (error) {
      this.rejected(error); // a cost function that threw, or a bad cost
    }
  }

  /** What a partner rule's cost function sees: the method, origin and path. */
  #costRequest(): { method: string; origin: string; path: string } {
    const req = this.#req;
    return { method: req.method, origin: originOf(req, this.#options), path: pathOf(req) };
  }

  /** WaitTarget: granted from inside the releasing request's microtask; sent in our own. */
  granted(permit: Permit): void {
    this.#ticket = undefined;
    if (this.#phase !== QUEUED) {
      permit.release(); // cannot happen: a cancelled ticket is never granted
      return;
    }
    this.#phase = GRANTED;
    this.#hold(permit);
    queueMicrotask(() => this.#sendGranted());
  }

  /** WaitTarget: shed (queue full, wait deadline). A cancel of ours finds the phase moved on. */
  rejected(reason: unknown): void {
    this.#ticket = undefined;
    if (this.#phase !== QUEUED) return;
    this.#fail(reason as Error);
  }

  /** The request failed before it got a socket (a shed, an unknown host): Node's own path. */
  #fail(error: Error): void {
    this.#phase = DONE;
    this.#detach();
    failUnsent(this.#req, error);
  }

  #sendGranted(): void {
    if (this.#phase !== GRANTED) return; // destroyed meanwhile: already settled
    const scope = this.#scope!;
    this.#scope = undefined;
    scope.runInAsyncScope(this.#send, this);
  }

  #send(): void {
    this.#phase = SENT;
    const req = this.#req;
    req.once('socket', onRequestSocket);
    req.once('close', onRequestClose);
    try {
      this.#addRequest(req, this.#options);
    } catch (error) {
      // The wrapped agent threw instead of failing the request: fail it as Node would.
      req.off('socket', onRequestSocket);
      req.off('close', onRequestClose);
      this.#takePermit()?.release();
      this.#fail(error as Error);
    }
  }

  /** @internal our `destroy` on the request: the caller's abort, or maxHold's. */
  destroyed(error: Error | undefined): void {
    const req = this.#req;
    const phase = this.#phase;
    if (phase === SENT) {
      this.#aborted = true;
      this.#destroyError ??= error;
    }
    this.#destroy.call(req, error);
    if (phase !== QUEUED && phase !== GRANTED) return;
    this.#aborted = true;
    this.#phase = DONE;
    this.#ticket?.cancel(error);
    this.#ticket = undefined;
    const permit = this.#takePermit();
    if (permit !== undefined) {
      if (error !== undefined) reportRequestError(permit, error, true);
      permit.release('aborted');
    }
    this.#detach();
    // No socket yet: Node delivers a destroyed request's 'error' and 'close' when one arrives.
    failUnsent(req);
  }

  /** @internal the request got its socket (a new one or one from the pool). */
  socketAssigned(socket: Socket): void {
    if (this.#phase !== SENT) return;
    const s = socket as Socket & Gated;
    this.#socket = s;
    s[kGated] = this;
    s.on('data', onSocketData);
    s.on('error', onSocketError);
  }

  /** @internal response bytes arrived (headers first). */
  progressed(): void {
    const permit = this.#permit;
    if (permit === undefined) return;
    permit.noteProgress();
    if (this.#responded) return;
    const res = (this.#req as ClientRequest & { res?: IncomingMessage | null }).res;
    if (res == null) return;
    this.#responded = true;
    reportResponse(permit, res.statusCode ?? 0, res.headers, this.#heldAtGrant);
  }

  /** @internal the socket failed under the request (reset, refused, a TLS error). */
  socketFailed(error: Error): void {
    if (this.#failed) return;
    this.#failed = true;
    reportRequestError(this.#permit, error, this.#aborted);
  }

  /** @internal Node's 'close': the socket is closed on our side, or back in the pool. */
  closed(): void {
    if (this.#phase !== SENT) return;
    this.#phase = DONE;
    this.#detach();
    const permit = this.#takePermit();
    if (permit === undefined) return;
    if (!this.#failed) {
      // No socket error: a response cut short (the partner closed mid-body), our destroy, or
      // no response at all (the partner closed the connection first: Node's "socket hang up").
      const res = (this.#req as ClientRequest & { res?: IncomingMessage | null }).res;
      const error =
        res == null
          ? (this.#destroyError ?? (this.#aborted ? undefined : hangUp()))
          : (res.errored ?? (res.complete === false ? cutShort() : this.#destroyError));
      if (error != null) reportRequestError(permit, error, this.#aborted);
    }
    if (!this.#aborted) {
      queueMicrotask(() => permit.release('released'));
      return;
    }
    const holdMs = holdAfterAbortOf(permit.gate);
    if (holdMs > 0) afterAtLeast(holdMs, () => releaseAborted(permit));
    else queueMicrotask(() => permit.release('aborted'));
  }

  /** maxHold passed: the gate is taking the permit back; the request is destroyed with it. */
  #holdTimedOut(error: PermitHoldTimeoutError): void {
    this.#req.destroy(error);
  }

  #hold(permit: Permit): void {
    this.#permit = permit;
    this.#heldAtGrant = permit.gate.held;
    const req = this.#req;
    // Leak reports get method, origin and path only: the permit drops the query when read.
    permit.request = {
      method: req.method,
      origin: originOf(req, this.#options),
      path: pathOf(req),
    };
    if (permit.gate.maxHold !== undefined) {
      permit.onHoldTimeout = (error) => this.#holdTimedOut(error);
    }
  }

  #takePermit(): Permit | undefined {
    const permit = this.#permit;
    this.#permit = undefined;
    if (permit !== undefined) permit.onHoldTimeout = undefined;
    return permit;
  }

  /** Leaves the request and its socket as it found them (a keep-alive socket serves others). */
  #detach(): void {
    const req = this.#req as ClientRequest & Gated;
    if (req.destroy === (gatedDestroy as unknown))
      req.destroy = this.#destroy as ClientRequest['destroy'];
    req[kGated] = undefined;
    const socket = this.#socket;
    if (socket === undefined) return;
    this.#socket = undefined;
    socket.off('data', onSocketData);
    socket.off('error', onSocketError);
    if (socket[kGated] === this) socket[kGated] = undefined;
  }
}

/**
 * The request's origin as the limiter keys it: `protocol//host:port`, IPv6 in brackets. A
 * request to a forward proxy (axios's `proxy` option, or `HTTP_PROXY`) names its target in an
 * absolute-form path (`GET http://partner/x`) and the proxy sends it there: its origin is the
 * target's, not the proxy's (which every host behind the proxy would share).
 */
export function originOf(req: ClientRequest, options: RequestOptions): string {
  const target = absoluteTarget(req.path);
  if (target !== undefined) return target.origin;
  const host = req.host;
  const bracketed = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `${req.protocol}//${bracketed}:${options.port ?? (req.protocol === 'https:' ? 443 : 80)}`;
}

/** The request's path as reports show it: an absolute-form path's own, without the origin. */
export function pathOf(req: ClientRequest): string {
  const target = absoluteTarget(req.path);
  return target === undefined ? req.path : `${target.pathname}${target.search}`;
}

/** An absolute-form http(s) request target (`http://partner/x`), parsed; else `undefined`. */
function absoluteTarget(path: string): URL | undefined {
  if (!ABSOLUTE_FORM.test(path)) return undefined;
  try {
    return new URL(path);
  } catch {
    return undefined; // the proxy refuses it: gated by the host it is sent to
  }
}

const ABSOLUTE_FORM = /^https?:\/\//i;

/**
 * Node's own delivery for a request that got no socket (its agent's connect failed): 'error'
 * (the given one, or the destroy's, or none after `abort()`), then 'close', on the next tick.
 */
export function failUnsent(req: ClientRequest, error?: Error): void {
  (req.onSocket as unknown as OnSocket).call(req, null, error);
}

// Shared listeners (one function for every request, not a closure each): the request or
// socket they are called on leads to its GatedNodeRequest.

function gatedDestroy(this: ClientRequest & Gated, error?: Error): ClientRequest {
  const gated = this[kGated];
  if (gated === undefined) return this; // cannot happen: detach restores destroy first
  gated.destroyed(error);
  return this;
}

function onRequestSocket(this: ClientRequest & Gated, socket: Socket): void {
  this[kGated]?.socketAssigned(socket);
}

function onRequestClose(this: ClientRequest & Gated): void {
  this[kGated]?.closed();
}

function onSocketData(this: Socket & Gated): void {
  this[kGated]?.progressed();
}

function onSocketError(this: Socket & Gated, error: Error): void {
  this[kGated]?.socketFailed(error);
}

function cutShort(): Error {
  return Object.assign(new Error('the response ended before its body was complete'), {
    code: 'ECONNRESET',
  });
}

/** The partner closed the connection before any response: what Node reports as a hang-up. */
function hangUp(): Error {
  return Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
}

function releaseAborted(permit: Permit): void {
  permit.release('aborted');
}
