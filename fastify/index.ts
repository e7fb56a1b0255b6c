/**
 * `hostgate/fastify`: the Fastify 5 plugin, with what `hostgate/express` offers.
 *
 * - `request.outbound` (`signal`, `fetch`, `request`): outbound calls through the partner gates,
 *   cancelled when the client goes away or the request's deadline passes.
 * - Shed errors become `503` + `Retry-After` + `application/problem+json`; a passed deadline
 *   `504`; a client that went away gets nothing written.
 * - `status`: the status page (HTML, or JSON for `Accept: application/json`) on a route.
 *
 * Built on the Express-free parts of `hostgate/express` (the per-request context, the problem
 * bodies, the status page): the same semantics, one implementation. Needs undici at run time,
 * as `hostgate/express` does.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyPluginCallback, FastifyReply, FastifyRequest } from 'fastify';
import {
  type Outbound,
  type OutboundMiddleware,
  type OutboundOptions,
  outbound,
} from '../middleware/outbound.js';
import { internal, retryAfterSeconds, type ShedOptions } from '../middleware/shed.js';
import { type StatusOptions, statusHandler } from '../middleware/status.js';
import { checkKnownKeys, checkObject, describe } from '../src/common/options.js';
import { findShedError } from '../src/index.js';

export type { BudgetFunction, DeadlineOption, DeadlineOptions } from '../middleware/deadline.js';
export type { Outbound, OutboundOptions, ShedOptions, StatusOptions };

export interface HostgateFastifyOptions extends Omit<OutboundOptions, 'priority'> {
  /**
   * The priority class of a request's outbound calls at partner gates with `priorities`: a
   * class name, or a function of the raw Node request (`request.raw`); `undefined`: the gate's
   * first class. A call's own `priorityClass` option wins.
   */
  priority?: string | ((req: IncomingMessage) => string | undefined);
  /**
   * Turn shed errors into `503` + `Retry-After` problem responses (default: on, with
   * {@link ShedOptions}). `false` leaves errors to your own handler, which can call
   * {@link replyShed}.
   */
  shed?: ShedOptions | false;
  /**
   * Serve the status page at this path (or `{ path, ...StatusOptions }`). Off by default: it
   * names partners and paths, so mount it where only operators reach it. Needs `limiter`.
   */
  status?: string | ({ path: string } & StatusOptions);
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by `hostgate/fastify`: this request's disconnect-aware outbound client. */
    outbound: Outbound;
  }
  interface FastifyInstance {
    /** Set by `hostgate/fastify`: the dispatcher and limiter behind `request.outbound`. */
    hostgate: Pick<OutboundMiddleware, 'dispatcher' | 'limiter'>;
  }
}

const PLUGIN_KEYS = ['shed', 'status'] as const;
const REGISTER_KEYS = ['prefix', 'logLevel', 'logSerializers'] as const;
const SHED_KEYS = ['status', 'problem', 'onDisconnect', 'details'] as const;

type Resolved = ReturnType<typeof internal.resolve>;

/**
 * Answers `error` if it is hostgate's: a shed error (also as the `cause` of a client's error)
 * becomes `503` + `Retry-After` problem+json, a passed deadline `504`, a client disconnect
 * nothing at all. Returns false for any other error, untouched. For your own error handler when
 * the plugin's is off (`shed: false`).
 *
 * @example
 * app.setErrorHandler((error, request, reply) => {
 *   if (replyShed(error, request, reply)) return;
 *   reply.send(error);
 * });
 */
export function replyShed(
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  options?: ShedOptions,
): boolean {
  return answer(error, request, reply, internal.resolve('replyShed', options, SHED_KEYS));
}

function answer(
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  options: Resolved,
): boolean {
  const raw = request.raw as IncomingMessage;
  // The request's outbound signal is the witness for clients whose abort errors carry no cause.
  const gone = internal.hangUpOf(error, raw);
  if (gone !== undefined) {
    options.onDisconnect?.(gone, raw);
    // Nothing to write to a client that left: stop Fastify from trying, close what is left.
    reply.hijack();
    if (!reply.raw.writableEnded && !reply.raw.destroyed) reply.raw.destroy();
    return true;
  }
  const shed = findShedError(error);
  if (shed !== undefined) {
    if (reply.sent || internal.isGone(reply.raw)) return true;
    const problem = options.problem(shed, raw, options.status);
    send(reply, options.status, problem, retryAfterSeconds(shed.retryAfterMs));
    return true;
  }
  const expired = internal.expiryOf(error, raw);
  if (expired === undefined) return false;
  if (reply.sent || internal.isGone(reply.raw)) return true;
  send(reply, 504, internal.deadlineProblem(expired));
  return true;
}

function send(reply: FastifyReply, status: number, problem: object, retryAfter?: number): void {
  reply
    .code(status)
    .header('cache-control', 'no-store')
    .header('content-type', 'application/problem+json');
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
  reply.send(Buffer.from(JSON.stringify(problem))); // a Buffer: Fastify adds no charset
}

function plugin(
  fastify: FastifyInstance,
  options: HostgateFastifyOptions,
  done: (error?: Error) => void,
): void {
  try {
    setUp(fastify, options);
  } catch (error) {
    done(error as Error); // Fastify's register() rejects with it: misconfiguration is loud
    return;
  }
  done();
}

function setUp(fastify: FastifyInstance, options: HostgateFastifyOptions): void {
  checkObject('hostgate/fastify options', options);
  // register()'s own options (prefix, logLevel, …) reach the plugin too: Fastify's, not ours.
  const { shed, status, prefix, logLevel, logSerializers, ...outboundOptions } =
    options as HostgateFastifyOptions & Record<(typeof REGISTER_KEYS)[number], unknown>;
  checkKnownKeys('hostgate/fastify', options, [
    ...PLUGIN_KEYS,
    ...REGISTER_KEYS,
    ...OUTBOUND_KEY_NAMES,
  ]);
  // outbound() calls priority with the raw request it is given: Fastify's request.raw.
  const middleware = outbound(outboundOptions as OutboundOptions);
  const shedOptions =
    shed === false ? undefined : internal.resolve('hostgate/fastify shed', shed, SHED_KEYS);
  const statusRoute = parseStatus(status, middleware);

  fastify.decorate('hostgate', { dispatcher: middleware.dispatcher, limiter: middleware.limiter });
  fastify.decorateRequest('outbound', null as unknown as Outbound);
  fastify.addHook('onRequest', (request, reply, next) => {
    let called = false;
    middleware(request.raw, reply.raw, (error) => {
      called = true;
      if (error !== undefined) {
        next(error as Error);
        return;
      }
      request.outbound = (request.raw as IncomingMessage & { outbound: Outbound }).outbound;
      next();
    });
    // outbound() answered itself (400 for an invalid deadline header): Fastify must not.
    if (!called) reply.hijack();
  });
  fastify.addHook('onClose', async () => {
    await middleware.close();
  });
  if (shedOptions !== undefined) {
    fastify.setErrorHandler(function hostgateErrors(error, request, reply) {
      if (answer(error, request, reply, shedOptions)) return;
      throw error; // to Fastify's default handler
    });
  }
  if (statusRoute !== undefined) {
    const { path, handler } = statusRoute;
    fastify.get(path, (request, reply) => {
      reply.hijack();
      handler(request.raw, reply.raw);
    });
  }
}

const OUTBOUND_KEY_NAMES = ['limiter', 'dispatcher', 'perRequest', 'deadline', 'priority'] as const;

function parseStatus(
  value: HostgateFastifyOptions['status'],
  middleware: OutboundMiddleware,
): { path: string; handler: ReturnType<typeof statusHandler> } | undefined {
  if (value === undefined) return undefined;
  const { path, ...statusOptions } = typeof value === 'string' ? { path: value } : value;
  if (typeof path !== 'string' || !path.startsWith('/')) {
    throw new TypeError(
      `hostgate/fastify: status must be a route path starting with "/" (or { path, ... }), got ${describe(path)}`,
    );
  }
  if (middleware.limiter === undefined) {
    throw new TypeError(
      'hostgate/fastify: status needs the limiter option (with a dispatcher alone the plugin knows no gates)',
    );
  }
  return { path, handler: statusHandler(middleware.limiter, statusOptions) };
}

/**
 * The Fastify plugin: `app.register(hostgate, { limiter })`. Options are `outbound()`'s
 * (`limiter` or `dispatcher`, `perRequest`, `deadline`, `priority`) plus `shed` and `status`.
 * Registered as fastify-plugin registers a plugin (skip-override), so `request.outbound` and
 * the error handler apply to the whole app rather than one encapsulated context.
 *
 * @example
 * const app = Fastify();
 * await app.register(hostgate, { limiter, perRequest: 4, status: '/internal/hostgate' });
 * app.get('/report', async (request) => {
 *   const res = await request.outbound.fetch('https://api.billing.example/invoices');
 *   return res.json();
 * });
 */
export const hostgate: FastifyPluginCallback<HostgateFastifyOptions> = Object.assign(plugin, {
  // What fastify-plugin would set, without a runtime dependency for three properties (a
  // devDependency would leave `hostgate/fastify` unimportable in users' projects). Fastify reads
  // them at register(): skip-override shares the plugin's decorations and hooks with the whole
  // app instead of an encapsulated context; plugin-meta's `fastify` range is checked against the
  // running Fastify (FST_ERR_PLUGIN_VERSION_MISMATCH) and its `name` lets other plugins depend
  // on this one.
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'hostgate',
  [Symbol.for('plugin-meta')]: { fastify: '5.x', name: 'hostgate' },
});

export default hostgate;
