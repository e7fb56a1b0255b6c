/**
 * `req.outbound` on Express's Request type. Its own module, imported by `hostgate/express` only,
 * so that `hostgate/fastify` (which reuses outbound()) needs no Express types to compile.
 */
import type {} from 'express-serve-static-core';
import type { Outbound } from './outbound.js';

declare module 'express-serve-static-core' {
  interface Request {
    /** Set by `outbound()` from `hostgate/express`. */
    outbound: Outbound;
  }
}
