/**
 * Typed errors shared by every layer. Each class has a stable `code` and a brand, so
 * `instanceof` and {@link isHostgateError} work across two copies of the package.
 */

const kBrand = Symbol.for('hostgate.error');

export type HostgateErrorCode =
  | 'HOSTGATE_QUEUE_FULL'
  | 'HOSTGATE_QUEUE_TIMEOUT'
  | 'HOSTGATE_QUEUE_CLEARED'
  | 'HOSTGATE_HOLD_TIMEOUT'
  | 'HOSTGATE_CLIENT_DISCONNECTED'
  | 'HOSTGATE_RESPONSE_SENT'
  | 'HOSTGATE_UNKNOWN_HOST'
  | 'HOSTGATE_TOO_MANY_HOSTS'
  | 'HOSTGATE_PARTNER_COOLDOWN'
  | 'HOSTGATE_PARTNER_OPEN'
  | 'HOSTGATE_STORE_UNAVAILABLE'
  | 'HOSTGATE_LEASE_LOST'
  | 'HOSTGATE_SHARED_LAYOUT'
  | 'HOSTGATE_DEADLINE_SHED'
  | 'HOSTGATE_DEADLINE_EXCEEDED'
  | 'HOSTGATE_RATE_LIMITED';

export class HostgateError extends Error {
  /** Stable machine-readable code; branch on this rather than on the message. */
  readonly code: HostgateErrorCode;
  /** Partner (gate) name, or the origin for per-origin gates, when the error concerns one. */
  readonly partner: string | undefined;
  readonly [kBrand] = true;

  constructor(
    code: HostgateErrorCode,
    message: string,
    partner?: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.partner = partner;
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (!isHostgateError(value)) return false;
    const code = (this as { readonly CODE?: string }).CODE;
    return code === undefined || value.code === code;
  }
}

export function isHostgateError(value: unknown): value is HostgateError {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { [kBrand]?: unknown })[kBrand] === true
  );
}

/** A gate refused a caller without serving it; `retryAfterMs` says when trying again is sensible. */
export abstract class ShedError extends HostgateError {
  /** Honest estimate, in ms, of when a retry could be served (queue length × observed hold time). */
  readonly retryAfterMs: number;
  constructor(
    code: HostgateErrorCode,
    message: string,
    partner: string | undefined,
    retryAfterMs: number,
  ) {
    super(code, message, partner);
    this.retryAfterMs = retryAfterMs;
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (!isShedError(value)) return false;
    const code = (this as { readonly CODE?: string }).CODE;
    return code === undefined || value.code === code;
  }
}

/** True for errors that mean "refused to protect the partner; try again later" (503 material). */
export function isShedError(value: unknown): value is ShedError {
  return isHostgateError(value) && typeof (value as ShedError).retryAfterMs === 'number';
}

/** The gate's queue was full: rejected at once, without waiting and without any timer. */
export class QueueFullError extends ShedError {
  static readonly CODE = 'HOSTGATE_QUEUE_FULL';
  /**
   * `bound`: the queue bound that was hit, by its option name (`maxQueue`, or a priority class's
   * `priorities[1].maxQueue`) and value: the message says which, and how to raise it.
   */
  constructor(
    partner: string | undefined,
    queued: number,
    retryAfterMs: number,
    bound?: { readonly option: string; readonly value: number },
  ) {
    const full =
      bound === undefined
        ? `${queued} waiting); retry after ${seconds(retryAfterMs)}`
        : `${queued} waiting, ${bound.option} ${bound.value}); retry after ${seconds(retryAfterMs)}, or raise ${bound.option} (maxQueue: Infinity for batch work)`;
    super(
      'HOSTGATE_QUEUE_FULL',
      `queue for ${label(partner)} is full (${full}`,
      partner,
      retryAfterMs,
    );
  }
}

/**
 * The waiter was taken out of the queue by `clearQueue()` before it got a permit (p-queue's
 * `clear()`). Not a shed: nobody refused the caller for load, so it carries no Retry-After.
 */
export class QueueClearedError extends HostgateError {
  static readonly CODE = 'HOSTGATE_QUEUE_CLEARED';
  constructor(partner: string | undefined) {
    super(
      'HOSTGATE_QUEUE_CLEARED',
      `the queue of ${label(partner)} was cleared (clearQueue()) before this call got a permit`,
      partner,
    );
  }
}

/** The caller waited its whole wait deadline without getting a permit. */
export class QueueTimeoutError extends ShedError {
  static readonly CODE = 'HOSTGATE_QUEUE_TIMEOUT';
  constructor(partner: string | undefined, waitedMs: number, retryAfterMs: number) {
    super(
      'HOSTGATE_QUEUE_TIMEOUT',
      `no permit for ${label(partner)} within ${Math.round(waitedMs)} ms; retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
  }
}

/**
 * A gate's request rate (`rate`) had no slot for the caller within its wait deadline, given the
 * cost already queued: shed at once, not at the deadline. `retryAfterMs` is exact: when the
 * rate would have that slot (GCRA knows).
 */
export class RateLimitedError extends ShedError {
  static readonly CODE = 'HOSTGATE_RATE_LIMITED';
  constructor(
    partner: string | undefined,
    rate: { readonly limit: number; readonly per: number; readonly burst: number },
    backlog: number,
    retryAfterMs: number,
  ) {
    super(
      'HOSTGATE_RATE_LIMITED',
      `no slot in the rate of ${label(partner)} (${rate.limit} per ${rate.per} ms, burst ${rate.burst}; ${backlog} queued) within this call's wait deadline; retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
  }
}

/** Too many distinct unknown hosts are busy at once; the per-origin map is at its bound. */
export class TooManyHostsError extends ShedError {
  static readonly CODE = 'HOSTGATE_TOO_MANY_HOSTS';
  constructor(origin: string, maxHosts: number, retryAfterMs: number) {
    super(
      'HOSTGATE_TOO_MANY_HOSTS',
      `cannot open a gate for ${origin}: all ${maxHosts} per-origin gates are busy (maxHosts); retry after ${seconds(retryAfterMs)}`,
      origin,
      retryAfterMs,
    );
  }
}

/**
 * A partner asked for no calls before a time — a 429/503 with `Retry-After`, or rate-limit
 * headers saying its budget is spent until a reset — and this call could not wait that long (a
 * retrier's cooldown, or a wait deadline ending before the reset): shed before dispatch, so that
 * the partner is not hit by every caller at once. `retryAfterMs` is the time left until then.
 */
export class PartnerCooldownError extends ShedError {
  static readonly CODE = 'HOSTGATE_PARTNER_COOLDOWN';
  /** `signal`: what the partner said, for the message (default `Retry-After`). */
  constructor(partner: string, retryAfterMs: number, signal = 'Retry-After') {
    super(
      'HOSTGATE_PARTNER_COOLDOWN',
      `${partner} asked callers to back off (${signal}); retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
  }
}

/**
 * The partner's breaker is open: too many of its recent calls failed (connection errors,
 * timeouts, 5xx), so new calls are shed at once, without queueing, until `retryAfterMs` from now,
 * when a few probes are let through (half-open). Also the answer while half-open with every probe
 * out. Express's `shed()` answers it with 503 and `Retry-After`.
 */
export class PartnerOpenError extends ShedError {
  static readonly CODE = 'HOSTGATE_PARTNER_OPEN';
  constructor(partner: string, retryAfterMs: number, why: string) {
    super(
      'HOSTGATE_PARTNER_OPEN',
      `${partner} is failing (${why}): its breaker is open; retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
  }
}

/**
 * A shared gate could not reach its store (Redis down, paused or too slow) and its policy is
 * `onStoreError: 'reject'`: shed rather than risk the partner's cap. Also the answer of a closed store.
 */
export class StoreUnavailableError extends ShedError {
  static readonly CODE = 'HOSTGATE_STORE_UNAVAILABLE';
  constructor(partner: string | undefined, retryAfterMs: number, why = 'its store is unreachable') {
    super(
      'HOSTGATE_STORE_UNAVAILABLE',
      `shared gate ${label(partner)} cannot admit: ${why}; retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
  }
}

/**
 * The request's remaining deadline budget is shorter than this partner's expected queue wait
 * plus its typical (p50) call: the call was refused before taking a queue slot or a permit,
 * rather than left to time out at the partner.
 */
export class DeadlineShedError extends ShedError {
  static readonly CODE = 'HOSTGATE_DEADLINE_SHED';
  /** Budget left when the call was refused, ms. */
  readonly remainingMs: number;
  /** Expected queue wait plus the partner's p50 hold at that moment, ms. */
  readonly neededMs: number;
  constructor(
    partner: string | undefined,
    remainingMs: number,
    neededMs: number,
    retryAfterMs: number,
  ) {
    super(
      'HOSTGATE_DEADLINE_SHED',
      `${label(partner)} cannot answer within the ${Math.max(0, Math.floor(remainingMs))} ms left of this request's deadline (expected wait + typical call: ${Math.ceil(neededMs)} ms); retry after ${seconds(retryAfterMs)}`,
      partner,
      retryAfterMs,
    );
    this.remainingMs = remainingMs;
    this.neededMs = neededMs;
  }
}

/**
 * A shared gate's store lost this request's lease (an event-loop stall longer than the lease, a
 * Redis restart) and the store's `onLeaseLost` is `'abort'`: the request was aborted.
 */
export class LeaseLostError extends HostgateError {
  static readonly CODE = 'HOSTGATE_LEASE_LOST';
  readonly heldMs: number;
  constructor(partner: string | undefined, heldMs: number) {
    super(
      'HOSTGATE_LEASE_LOST',
      `request to ${label(partner)} lost its shared lease after ${Math.round(heldMs)} ms (a stall longer than the lease, or Redis restarted) and was aborted`,
      partner,
    );
    this.heldMs = heldMs;
  }
}

/**
 * A shared gate's keys in Redis were written by a process with another key layout (another
 * hostgate version, or another mode of shared gates, on the same prefix and gate name): this
 * process refuses to touch them rather than corrupt the gate. Redis's state is left as it was.
 */
export class SharedLayoutError extends HostgateError {
  static readonly CODE = 'HOSTGATE_SHARED_LAYOUT';
  /** The layout found in Redis (the gate's meta hash, field `v`), e.g. `'leased/1'`. */
  readonly found: string;
  /** The layout this process writes and reads, e.g. `'fifo/1'`. */
  readonly expected: string;
  constructor(partner: string | undefined, found: string, expected: string) {
    super(
      'HOSTGATE_SHARED_LAYOUT',
      `shared gate ${label(partner)} is kept in Redis in layout ${JSON.stringify(found)} by another process on the same prefix, and this process uses ${JSON.stringify(expected)}: two hostgate versions or shared-gate modes cannot share a gate. Give one of them another \`prefix\` (or gate name), or finish the rollout so every process runs the same version and mode`,
      partner,
    );
    this.found = found;
    this.expected = expected;
  }
}

/**
 * The inbound request's deadline passed: its outbound calls, waiting or in flight, were
 * aborted with this reason. `hostgate/express`'s `shed()` answers it with 504.
 */
export class DeadlineExceededError extends HostgateError {
  static readonly CODE = 'HOSTGATE_DEADLINE_EXCEEDED';
  /** The request's whole budget, ms. */
  readonly budgetMs: number;
  constructor(budgetMs: number) {
    super(
      'HOSTGATE_DEADLINE_EXCEEDED',
      `the request's deadline of ${Math.round(budgetMs)} ms passed; its outbound calls were aborted`,
    );
    this.budgetMs = budgetMs;
  }
}

/**
 * A permit's request made no progress for `maxHold` (an unread body, a stuck stream, a partner
 * that never answered), or was held past `maxHoldTotal`; its request was aborted. For an HTTP
 * request the message names its origin and says whether any response came: none at all is a
 * partner that is down or hung, or a wrong port, not a body left unread.
 */
export class PermitHoldTimeoutError extends HostgateError {
  static readonly CODE = 'HOSTGATE_HOLD_TIMEOUT';
  readonly heldMs: number;
  /** Time without progress (ms) when `maxHold` took it back; `undefined` for `maxHoldTotal`. */
  readonly quietMs: number | undefined;
  /** The request's origin (`scheme://host[:port]`) when the permit was an HTTP request's. */
  readonly origin: string | undefined;
  /**
   * For an HTTP request: whether any of its response (the head, a body chunk) had arrived.
   * `false`: the partner never answered. `undefined` when the permit was no HTTP request's.
   */
  readonly responded: boolean | undefined;
  constructor(
    partner: string | undefined,
    heldMs: number,
    quietMs?: number,
    request?: { origin?: string | undefined; responded?: boolean | undefined },
  ) {
    const origin = request?.origin === '' ? undefined : request?.origin;
    const to = `request to ${label(partner)}${origin === undefined || partner?.startsWith(origin) ? '' : ` at ${origin}`}`;
    super(
      'HOSTGATE_HOLD_TIMEOUT',
      quietMs === undefined
        ? `${to} held its permit for ${Math.round(heldMs)} ms (maxHoldTotal) and was aborted`
        : request?.responded === false
          ? `${to} got no response for ${Math.round(quietMs)} ms (maxHold) and was aborted; is the partner up and listening for HTTP on that host and port?`
          : `${to} made no progress for ${Math.round(quietMs)} ms (maxHold; held ${Math.round(heldMs)} ms) and was aborted; read or cancel response bodies`,
      partner,
    );
    this.heldMs = heldMs;
    this.quietMs = quietMs;
    this.origin = origin;
    this.responded = request?.responded;
  }
}

/** The inbound client went away before its response finished. Not a server error. */
export class ClientDisconnectedError extends HostgateError {
  static readonly CODE = 'HOSTGATE_CLIENT_DISCONNECTED';
  constructor() {
    super('HOSTGATE_CLIENT_DISCONNECTED', 'the client disconnected before the response finished');
  }
}

/**
 * The inbound response was already sent (a 503 for a shed sibling, say): an outbound call of
 * that request still running was cancelled, since nothing would read its answer. Not a server
 * error; work meant to outlive the response goes through `req.outbound.background`.
 */
export class ResponseSentError extends HostgateError {
  static readonly CODE = 'HOSTGATE_RESPONSE_SENT';
  constructor() {
    super(
      'HOSTGATE_RESPONSE_SENT',
      "the response was already sent, so this outbound call was cancelled; use req.outbound.background (or outbound({ afterResponse: 'continue' })) for work meant to outlive the response",
    );
  }
}

/** `unknownHosts: 'reject'` and a host that matches no partner rule. */
export class UnknownHostError extends HostgateError {
  static readonly CODE = 'HOSTGATE_UNKNOWN_HOST';
  constructor(origin: string) {
    super(
      'HOSTGATE_UNKNOWN_HOST',
      `${origin} matches no partner rule and unknownHosts is 'reject'; add it to a partner's hosts`,
      origin,
    );
  }
}

/**
 * The shed error behind `err`, if any: the error itself, or one found along its `cause`
 * chain (fetch rejects with `TypeError('fetch failed')` whose `cause` is ours).
 */
export function findShedError(err: unknown): ShedError | undefined {
  let current = err;
  for (let depth = 0; depth < 8 && current != null; depth++) {
    if (isShedError(current)) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

function label(partner: string | undefined): string {
  return partner === undefined ? 'this gate' : partner;
}

function seconds(ms: number): string {
  return ms < 1000 ? `${Math.ceil(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}
