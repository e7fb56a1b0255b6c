/**
 * `hostgate/express`: Express 4 and 5 integration.
 *
 * - `outbound()` gives every request `req.outbound` (`signal`, `fetch`, `request`): outbound
 *   calls through the partner gates, cancelled when the client goes away or the request's
 *   deadline (`deadline`) passes.
 * - `shed()` turns shed errors into `503` + `Retry-After` + `application/problem+json`.
 * - `admit()` caps concurrently handled inbound requests with a bounded queue.
 *
 * Needs undici at run time (`outbound()` creates an `Agent` and calls its `fetch`/`request`):
 * hostgate declares it a peer dependency (`^7 || ^8`), so the import resolves, as Node resolves
 * any bare import from `node_modules/hostgate`, to the `undici` your project installed.
 *
 * @packageDocumentation
 * @module hostgate/express
 */
// req.outbound on Express's Request, and outbound() with its options typed for Express's request
// (hostgate/fastify does not load it: it needs no Express types).

export { type AdmitMiddleware, type AdmitOptions, admit } from './admit.js';
export type { DeadlineHeader, DeadlineHeaderFormat } from './deadline.js';
export * from './express-request.js';
export {
  DEFAULT_PER_REQUEST_MAX_QUEUE,
  DEFAULT_PER_REQUEST_QUEUE_TIMEOUT_MS,
  type Outbound,
  type OutboundBackground,
  type OutboundFetchInit,
  type OutboundMiddleware,
  type OutboundRequestOptions,
  type PerRequestOptions,
} from './outbound.js';
export {
  defaultProblem,
  type ErrorMiddleware,
  findClientDisconnected,
  type ProblemDetails,
  retryAfterSeconds,
  type ShedOptions,
  shed,
} from './shed.js';
export {
  type LeakStatus,
  type PartnerStatus,
  type StatusBody,
  type StatusHandler,
  type StatusOptions,
  statusHandler,
} from './status.js';
