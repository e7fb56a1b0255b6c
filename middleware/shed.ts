import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkKnownKeys, checkObject, describe } from '../src/common/options.js';
import {
  ClientDisconnectedError,
  DeadlineExceededError,
  findShedError,
  ResponseSentError,
  type ShedError,
} from '../src/index.js';

/** An RFC 9457 problem details object. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  [extension: string]: unknown;
}

export interface ShedOptions {
  /** Status for shed errors (default 503). */
  status?: number;
  /** Builds the `application/problem+json` body (default {@link defaultProblem}). */
  problem?: (error: ShedError, req: IncomingMessage, status: number) => ProblemDetails;
  /**
   * Put what only operators should see into the default body: `detail` becomes the error's
   * message and `partner` the gate that shed (a partner's name, or an unnamed host's internal
   * origin). Default `false`: a public answer names no upstream (docs/user-supplied-urls.md).
   * For callers you trust (an internal API), or to debug.
   */
  details?: boolean;
  /**
   * Called when a request failed because its client went away (`ClientDisconnectedError`).
   * Nothing is written and nothing is logged as a server error; hook your debug counter here.
   */
  onDisconnect?: (error: ClientDisconnectedError, req: IncomingMessage) => void;
}

export type ErrorMiddleware = (
  err: unknown,
  req: IncomingMessage,
  res: ServerResponse,
  next: (err?: unknown) => void,
) => void;

const SHED_KEYS = ['status', 'problem', 'onDisconnect', 'details'] as const;

const TITLES: Record<string, string> = {
  HOSTGATE_QUEUE_FULL: 'Capacity queue is full',
  HOSTGATE_QUEUE_TIMEOUT: 'Waited too long for capacity',
  HOSTGATE_TOO_MANY_HOSTS: 'Too many upstream hosts busy',
  HOSTGATE_DEADLINE_SHED: 'Not enough time left for the upstream call',
  HOSTGATE_STORE_UNAVAILABLE: 'Shared capacity store unreachable',
  HOSTGATE_PARTNER_COOLDOWN: 'Upstream asked callers to wait',
  HOSTGATE_PARTNER_OPEN: 'Upstream is failing',
};

/**
 * The default problem body, what a client needs and no more: `type` is a stable URN per error
 * code, `title` its fixed text, `detail` a fixed sentence with the wait, `retryAfter` the same
 * seconds as the header. No upstream is named: a shed error's message and partner say which
 * internal service is at capacity or failing (for an unnamed host, its internal origin). With
 * `{ details: true }`, `detail` is the error's message and `partner` the gate that shed.
 */
export function defaultProblem(
  error: ShedError,
  _req: IncomingMessage,
  status = 503,
  options: { details?: boolean } = {},
): ProblemDetails {
  const slug = error.code
    .replace(/^HOSTGATE_/, '')
    .toLowerCase()
    .replaceAll('_', '-');
  const retryAfter = retryAfterSeconds(error.retryAfterMs);
  if (options.details === true) {
    return {
      type: `urn:hostgate:problem:${slug}`,
      title: TITLES[error.code] ?? 'Service at capacity',
      status,
      detail: error.message,
      partner: error.partner ?? null,
      retryAfter,
    };
  }
  return {
    type: `urn:hostgate:problem:${slug}`,
    title: TITLES[error.code] ?? 'Service at capacity',
    status,
    detail: `The service cannot take this request now; retry after ${retryAfter} s.`,
    retryAfter,
  };
}

/** {@link defaultProblem} with `details: true`. */
function detailedProblem(error: ShedError, req: IncomingMessage, status: number): ProblemDetails {
  return defaultProblem(error, req, status, { details: true });
}

/** `Retry-After` in whole seconds: `ceil(ms / 1000)`, at least 1. */
export function retryAfterSeconds(ms: number): number {
  return Number.isFinite(ms) ? Math.max(1, Math.ceil(ms / 1000)) : 1;
}

/** The `ClientDisconnectedError` behind `err`, if any (itself or along its `cause` chain). */
export function findClientDisconnected(err: unknown): ClientDisconnectedError | undefined {
  return findCause(err, ClientDisconnectedError);
}

/**
 * The reason the request's own outbound signal (`req.outbound.signal`) aborted with, when it is
 * a `type`. An error that reaches the handler after that signal aborted is that abort's, whichever
 * client wrapped it: axios's `CanceledError` carries no cause and got 14's `AbortError` a cause of
 * `{}`, so the signal is the only witness (a fetch rejects with the reason itself).
 */
function abortedWith<T>(
  req: IncomingMessage,
  type: abstract new (...args: never[]) => T,
): T | undefined {
  const signal = (req as { outbound?: { signal?: unknown } }).outbound?.signal;
  if (!(signal instanceof AbortSignal) || !signal.aborted) return undefined;
  return signal.reason instanceof type ? signal.reason : undefined;
}

/**
 * The client hang-up behind `err`: a `ClientDisconnectedError` along its `cause` chain, or the
 * reason of the request's outbound signal when that aborted because the client went away.
 */
function hangUpOf(err: unknown, req: IncomingMessage): ClientDisconnectedError | undefined {
  return findClientDisconnected(err) ?? abortedWith(req, ClientDisconnectedError);
}

/** The request's own deadline behind `err` (its cause chain, or the outbound signal's reason). */
function expiryOf(err: unknown, req: IncomingMessage): DeadlineExceededError | undefined {
  return findCause(err, DeadlineExceededError) ?? abortedWith(req, DeadlineExceededError);
}

function findCause<T>(err: unknown, type: abstract new (...args: never[]) => T): T | undefined {
  let current = err;
  for (let depth = 0; depth < 8 && current != null; depth++) {
    if (current instanceof type) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** The request's own deadline passed: the upstream did not answer in time (504, no Retry-After). */
function writeDeadlineExceeded(error: DeadlineExceededError, res: ServerResponse): void {
  writeProblem(res, 504, deadlineProblem(error));
}

function deadlineProblem(error: DeadlineExceededError): ProblemDetails {
  return {
    type: 'urn:hostgate:problem:deadline-exceeded',
    title: 'Deadline exceeded',
    status: 504,
    detail: error.message,
    budgetMs: error.budgetMs,
  };
}

/** Ends `res` with `status` and `problem` as `application/problem+json`, never cached. */
function writeProblem(
  res: ServerResponse,
  status: number,
  problem: ProblemDetails,
  retryAfterSeconds?: number,
): void {
  const body = JSON.stringify(problem);
  res.statusCode = status;
  res.setHeader('content-type', 'application/problem+json');
  if (retryAfterSeconds !== undefined) res.setHeader('retry-after', String(retryAfterSeconds));
  res.setHeader('cache-control', 'no-store');
  res.setHeader('content-length', Buffer.byteLength(body));
  res.end(body);
}

interface Resolved {
  status: number;
  problem: NonNullable<ShedOptions['problem']>;
  onDisconnect: ShedOptions['onDisconnect'];
}

function resolve(
  where: string,
  options: ShedOptions | undefined,
  known: readonly string[],
): Resolved {
  const o = options ?? {};
  checkObject(`${where} options`, o);
  checkKnownKeys(where, o, known);
  const status = o.status ?? 503;
  if (!Number.isInteger(status) || status < 400 || status > 599) {
    throw new TypeError(
      `${where}: status must be an HTTP error status (400-599), got ${describe(status)}`,
    );
  }
  for (const key of ['problem', 'onDisconnect'] as const) {
    if (o[key] !== undefined && typeof o[key] !== 'function') {
      throw new TypeError(`${where}: ${key} must be a function, got ${describe(o[key])}`);
    }
  }
  if (o.details !== undefined && typeof o.details !== 'boolean') {
    throw new TypeError(`${where}: details must be a boolean, got ${describe(o.details)}`);
  }
  const problem = o.problem ?? (o.details === true ? detailedProblem : defaultProblem);
  return { status, problem, onDisconnect: o.onDisconnect };
}

/** Writes the shed response. The caller has checked that headers are not sent yet. */
function writeShed(
  error: ShedError,
  req: IncomingMessage,
  res: ServerResponse,
  options: Resolved,
): void {
  const problem = options.problem(error, req, options.status);
  writeProblem(res, options.status, problem, retryAfterSeconds(error.retryAfterMs));
}

/** The client is gone: nothing can or should be written. */
function isGone(res: ServerResponse): boolean {
  return res.destroyed || res.socket?.destroyed === true;
}

/**
 * Express error handler, mounted after your routes: a shed error (`QueueFullError`,
 * `QueueTimeoutError`, `TooManyHostsError`, `DeadlineShedError`, `PartnerCooldownError`,
 * `PartnerOpenError`, also as the `cause` of
 * fetch's `TypeError`) becomes `503` + `Retry-After` + an RFC 9457 `application/problem+json`
 * body. A `DeadlineExceededError` (the request's own deadline passed) becomes `504` with a
 * problem body and no `Retry-After`. A `ClientDisconnectedError` ends quietly: nothing is written to the gone socket and nothing is
 * passed on as a server error; so does a `ResponseSentError` after the response was sent. Any
 * error that arrives after `req.outbound.signal` aborted is judged by the signal's reason, whichever
 * client wrapped it (axios's `CanceledError`, got's `AbortError`): a hang-up is quiet (and reaches
 * `onDisconnect`), a passed deadline is a 504. Everything else goes to `next(err)` untouched.
 *
 * @example
 * app.use(shed());
 */
export function shed(options?: ShedOptions): ErrorMiddleware {
  const resolved = resolve('shed', options, SHED_KEYS);
  return function shedErrors(err, req, res, next) {
    const gone = hangUpOf(err, req);
    if (gone !== undefined) {
      resolved.onDisconnect?.(gone, req);
      // Normally the socket is already gone. If it is not (the error came from elsewhere),
      // close it rather than send a made-up status: the request was cancelled.
      if (!res.writableEnded && !isGone(res)) res.destroy();
      return;
    }
    // A call of a request whose response was already sent, cancelled since nothing would read
    // it: nothing to write, and no reason to have Express close the connection.
    if (
      res.writableEnded &&
      (findCause(err, ResponseSentError) ?? abortedWith(req, ResponseSentError)) !== undefined
    ) {
      return;
    }
    const shedError = findShedError(err);
    const expired = shedError === undefined ? expiryOf(err, req) : undefined;
    if (expired !== undefined && !res.headersSent) {
      if (!isGone(res)) writeDeadlineExceeded(expired, res);
      return;
    }
    if (shedError === undefined || res.headersSent) {
      next(err);
      return;
    }
    if (isGone(res)) return;
    writeShed(shedError, req, res, resolved);
  };
}

/** @internal shared with admit() and hostgate/fastify */
export const internal = {
  resolve,
  writeShed,
  writeProblem,
  isGone,
  findCause,
  deadlineProblem,
  hangUpOf,
  expiryOf,
};
