/**
 * What `hostgate/express` adds for Express's types: `req.outbound` on Express's Request, and
 * `outbound()` with its options typed for Express's request (`req.path`, `req.query`, ...). Its
 * own module, imported by `hostgate/express` only: outbound.ts and deadline.ts name no Express
 * type, so `hostgate/fastify` (which reuses outbound()) compiles without Express's types.
 */
import type { Request as ExpressRequest } from 'express-serve-static-core';
import type {
  BudgetFunction as BudgetFunctionOf,
  DeadlineOption as DeadlineOptionOf,
  DeadlineOptions as DeadlineOptionsOf,
} from './deadline.js';
import {
  type Outbound,
  type OutboundMiddleware,
  type OutboundOptions as OutboundOptionsOf,
  outbound as outboundOf,
} from './outbound.js';

declare module 'express-serve-static-core' {
  interface Request {
    /** Set by `outbound()` from `hostgate/express`. */
    outbound: Outbound;
  }
}

/** A budget in ms from Express's request (`req.path`, `req.query`, ...), or `undefined` for none. */
export type BudgetFunction = BudgetFunctionOf<ExpressRequest>;
/** Where a request's deadline budget comes from, and the rule for bad values. */
export type DeadlineOptions = DeadlineOptionsOf<ExpressRequest>;
/** `outbound({ deadline })`: ms, a function of Express's request, or {@link DeadlineOptions}. */
export type DeadlineOption = DeadlineOptionOf<ExpressRequest>;
/** `outbound()`'s options; `priority` and a `deadline` function get Express's request. */
export type OutboundOptions = OutboundOptionsOf<ExpressRequest>;

/**
 * Express middleware: gives every request `req.outbound` — a disconnect-aware `signal`, and
 * `fetch`/`request` bound to the limited dispatcher and to that signal. When the client goes
 * away, every outbound call of its request is cancelled, queued or in flight: its permits come
 * back and the partner sees the request closed. With `deadline`, the same happens when the
 * request's budget runs out, and calls that cannot make it are refused before they queue.
 *
 * @example
 * app.use(outbound({ limiter, perRequest: 4 }));
 * app.get('/report', async (req, res) => {
 *   const r = await req.outbound.fetch('https://api.billing.example/invoices');
 *   res.json(await r.json());
 * });
 *
 * @example
 * app.use(outbound({
 *   limiter,
 *   deadline: { header: ['x-request-timeout', 'grpc-timeout'], default: 2000, max: 5000 },
 *   priority: (req) => (req.get('x-batch') ? 'batch' : undefined),
 * }));
 * app.use(shed()); // DeadlineShedError: 503 + Retry-After; DeadlineExceededError: 504
 */
export function outbound(options: OutboundOptions): OutboundMiddleware {
  return outboundOf(options);
}
