import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Agent, Dispatcher } from 'undici';
import { checkKnownKeys, checkObject, describe } from '../src/common/options.js';
import { loadUndici } from '../src/http/undici.js';
import { type HostLimiter, type HostLimiterOptions, limitHosts, Semaphore } from '../src/index.js';
import { limiterFrom } from '../src/partners/host-limiter.js';
import { type DeadlineOption, InvalidHeader, parseDeadline } from './deadline.js';
import { OutboundContext, type Shared } from './outbound-context.js';
import type { Outbound, PerRequestOptions } from './outbound-types.js';
import { internal } from './shed.js';

export type {
  Outbound,
  OutboundBackground,
  OutboundFetchInit,
  OutboundRequestOptions,
  PerRequestOptions,
} from './outbound-types.js';

/**
 * Default per-request queue bound: 1,000 calls. A single inbound request that fans out wider
 * than that is a runaway loop, not a workload; the bound keeps it from growing without limit.
 */
export const DEFAULT_PER_REQUEST_MAX_QUEUE = 1000;
/**
 * Default per-request wait deadline: 30 s. Waiting for one's own sibling calls is not overload,
 * so this is no load-shedding deadline; it only breaks a self-inflicted stall (a sibling whose
 * response body is never read keeps its permit until the partner's maxHold, 60 s by default).
 */
export const DEFAULT_PER_REQUEST_QUEUE_TIMEOUT_MS = 30_000;

/**
 * `outbound()`'s options. `Req` is the request type the framework hands to `priority` and a
 * `deadline` function: Express's from `hostgate/express`, Node's `IncomingMessage` from
 * `hostgate/fastify`; this file names no Express type, so `hostgate/fastify` compiles without them.
 */
export interface OutboundOptions<Req extends IncomingMessage = IncomingMessage> {
  /** The partner gates: a `HostLimiter`, or its options. Mutually exclusive with `dispatcher`. */
  limiter?: HostLimiter | HostLimiterOptions;
  /**
   * Your own dispatcher, already composed with `limitHosts(...)` (and retry/redirect around
   * it). Used as is; `close()` leaves it open.
   */
  dispatcher?: Dispatcher;
  /**
   * Cap on one inbound request's concurrent outbound calls (its fan-out), so a single request
   * cannot take a whole partner gate. A number is the `limit`.
   */
  perRequest?: number | PerRequestOptions;
  /**
   * A per-request deadline budget, counted from when `outbound()` sees the request: ms, a
   * function of the request, or read from headers ({@link DeadlineOptions}). Every outbound
   * call's queue wait plus call must fit in what remains: past the deadline `req.outbound.signal`
   * aborts (`DeadlineExceededError`, 504 from `shed()`), and with `limiter` a call that cannot
   * make it (budget left < expected wait + the partner's p50 hold) is refused at once with
   * `DeadlineShedError` (503 + Retry-After), taking no queue slot and no permit.
   */
  deadline?: DeadlineOption<Req>;
  /**
   * The priority class of a request's outbound calls at partner gates with `priorities`: a
   * class name, or a function of the request (`undefined`: the gate's first class). A call's
   * own `priorityClass` option wins. Gates without classes ignore it. The function gets
   * Express's request (`req.path`, `req.query`, ...).
   */
  priority?: string | ((req: Req) => string | undefined);
  /**
   * What becomes of a request's outbound calls still running once its response has been sent
   * (a fan-out whose sibling was shed and answered 503): `'abort'` (default) cancels them with
   * `ResponseSentError` — nobody will read them, so their permits come back and the partner
   * sees them closed; `'continue'` lets them run. For single calls meant to outlive the
   * response, use `req.outbound.background` instead.
   */
  afterResponse?: 'abort' | 'continue';
}

export interface OutboundMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  /** The dispatcher every `req.outbound` call goes through. */
  readonly dispatcher: Dispatcher;
  /** The limiter, when `outbound()` was given one (its `stats()` show every partner gate). */
  readonly limiter: HostLimiter | undefined;
  /** Closes the Agent `outbound()` created; a dispatcher you passed in stays open. */
  close(): Promise<void>;
}

const OUTBOUND_KEYS = [
  'limiter',
  'dispatcher',
  'perRequest',
  'deadline',
  'priority',
  'afterResponse',
] as const;
const PER_REQUEST_KEYS = ['limit', 'maxQueue', 'queueTimeout'] as const;

/**
 * The middleware behind `req.outbound`, for any framework that hands it Node's request and
 * response (Express, and Fastify's `request.raw`/`reply.raw`). `hostgate/express` exports it typed
 * for Express's request (express-request.ts), with the user-facing documentation.
 */
export function outbound<Req extends IncomingMessage = IncomingMessage>(
  options: OutboundOptions<Req>,
): OutboundMiddleware {
  checkObject('outbound options', options);
  checkKnownKeys('outbound', options, OUTBOUND_KEYS);
  let dispatcher: Dispatcher;
  let limiter: HostLimiter | undefined;
  let owned: Agent | undefined;
  if (options.limiter !== undefined && options.dispatcher !== undefined) {
    throw new TypeError(
      'outbound: pass either limiter or dispatcher, not both (compose limitHosts into your dispatcher)',
    );
  }
  if (options.dispatcher !== undefined) {
    const given = options.dispatcher as unknown;
    if (
      given === null ||
      typeof given !== 'object' ||
      typeof (given as Dispatcher).dispatch !== 'function'
    ) {
      throw new TypeError(
        `outbound: dispatcher must be an undici Dispatcher, got ${describe(given)}`,
      );
    }
    dispatcher = options.dispatcher;
  } else if (options.limiter !== undefined) {
    limiter = limiterFrom('outbound: limiter', options.limiter);
    owned = new (loadUndici().Agent)();
    dispatcher = owned.compose(limitHosts(limiter));
  } else {
    throw new TypeError('outbound needs { limiter } (partner gates) or { dispatcher }');
  }
  const perRequest = parsePerRequest(options.perRequest);
  const deadline = parseDeadline(options.deadline);
  const priorityOf = parsePriority(options.priority);
  const afterResponse = options.afterResponse ?? 'abort';
  if (afterResponse !== 'abort' && afterResponse !== 'continue') {
    throw new TypeError(
      `outbound: afterResponse must be 'abort' or 'continue', got ${describe(afterResponse)}`,
    );
  }
  const shared: Shared = {
    dispatcher,
    perRequest,
    limiter,
    shedEarly: deadline?.shedEarly ?? false,
    propagate: deadline?.propagate,
    afterResponse,
  };

  const middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => {
    let budget: ReturnType<NonNullable<typeof deadline>['budgetFor']>;
    try {
      budget = deadline?.budgetFor(req);
    } catch (error) {
      next(error);
      return;
    }
    if (budget instanceof InvalidHeader) {
      rejectInvalid(res, budget.header);
      return;
    }
    let priorityClass: string | undefined;
    try {
      priorityClass = priorityOf(req as Req);
    } catch (error) {
      next(error);
      return;
    }
    const context = new OutboundContext(shared, res, budget, priorityClass);
    (req as IncomingMessage & { outbound: Outbound }).outbound = context;
    if (res.destroyed && !res.writableFinished) context.disconnect();
    // `once`: removed when it fires, and a ServerResponse always emits 'close' (after 'finish'
    // on a normal end), so nothing is left on a keep-alive socket or on the response.
    else res.once('close', context.onClose);
    next();
  };
  return Object.assign(middleware, {
    dispatcher,
    limiter,
    close: async () => {
      await owned?.close();
    },
  });
}

function parsePriority<Req extends IncomingMessage>(
  value: OutboundOptions<Req>['priority'],
): (req: Req) => string | undefined {
  if (value === undefined) return () => undefined;
  if (typeof value === 'string' && value !== '') return () => value;
  if (typeof value !== 'function') {
    throw new TypeError(
      `outbound: priority must be a class name or a function of the request, got ${describe(value)}`,
    );
  }
  return (req) => {
    const cls = value(req);
    if (cls !== undefined && (typeof cls !== 'string' || cls === '')) {
      throw new TypeError(
        `outbound priority function must return a class name or undefined, got ${describe(cls)}`,
      );
    }
    return cls;
  };
}

/** `deadline.invalid: 'reject'`: 400 naming the header, never echoing its value. */
function rejectInvalid(res: ServerResponse, header: string): void {
  internal.writeProblem(res, 400, {
    type: 'urn:hostgate:problem:invalid-deadline',
    title: 'Invalid deadline header',
    status: 400,
    detail: `the ${header} header is not a valid timeout`,
  });
}

function parsePerRequest(
  value: OutboundOptions['perRequest'],
): Required<PerRequestOptions> | undefined {
  if (value === undefined) return undefined;
  const options = typeof value === 'number' ? { limit: value } : value;
  checkObject('outbound perRequest', options);
  checkKnownKeys('outbound perRequest', options, PER_REQUEST_KEYS);
  const resolved = {
    limit: options.limit,
    maxQueue: options.maxQueue ?? DEFAULT_PER_REQUEST_MAX_QUEUE,
    queueTimeout: options.queueTimeout ?? DEFAULT_PER_REQUEST_QUEUE_TIMEOUT_MS,
  };
  try {
    new Semaphore(resolved); // validate at construction, not on the first request
  } catch (error) {
    throw new TypeError(`outbound perRequest: ${(error as Error).message}`);
  }
  return resolved;
}
